"""zipccl.hetero on torch.distributed (gloo): Layout as the C++ library validates it, and jobs of 4
and 8 processes whose LLM input and encoder gradients equal an undistributed run bit for bit."""
import json
import os
import subprocess
import sys
import time

import pytest

import spawn

torch = pytest.importorskip("torch")
from zipccl import hetero  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hetero_worker.py")


def test_layout_matches_the_cpp_library():
    lay = hetero.Layout(8, {"tp": 2, "first_rank": 4, "num_ranks": 4}, [{"tp": 1, "first_rank": 0, "num_ranks": 4}])
    assert (lay.llm.dp, lay.encoders[0].dp, lay.encoders[0].name) == (2, 4, "encoder0")
    assert ("boundary", 1, [[0, 1, 2, 3, 4, 5, 6, 7]]) in lay.group_families()
    with pytest.raises(hetero.LayoutError, match=r"not divisible by tp\*cp\*pp = 3"):
        hetero.Layout(4, {"tp": 3}, [{"tp": 1}])
    with pytest.raises(hetero.LayoutError):
        hetero.Layout(4, {"tp": 2}, [])  # at least one encoder
    with pytest.raises(ValueError, match="unknown field 'tpp'"):
        hetero.Layout(4, {"tpp": 2}, [{}])
    with pytest.raises(hetero.BatchError):
        lay.plan(0, [3, -1], 8, 2)


def run_job(case, world, tmp_path):
    store = tmp_path / "store"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    start = time.perf_counter()
    procs = [subprocess.Popen(spawn.python(WORKER, str(r), str(world), case, str(store)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for r in range(world)]
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        assert p.returncode == 0, err[-3000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    elapsed = time.perf_counter() - start
    print(f"{case}: {world} processes in {elapsed:.1f} s; " + "; ".join(
        f"rank {o['rank']}: setup {o['setup_s']} s step {o['step_s']} s" for o in outs))
    return outs


@pytest.mark.parametrize("case,world", [("colocated4", 4), ("separate8", 8)])
def test_gloo_job_equals_the_undistributed_model(case, world, tmp_path):
    outs = run_job(case, world, tmp_path)
    llm_ranks = [o for o in outs if "input_equal" in o]
    enc_ranks = [o for o in outs if "grad_equal" in o]
    assert len(llm_ranks) == 4 and len(enc_ranks) == 4
    assert all(o["input_equal"] for o in llm_ranks), llm_ranks
    assert sum(o["llm_rows"] for o in llm_ranks) == 2 * sum([3, 5, 0, 7, 2, 4, 6, 1, 9, 2])  # tp 2 replicates
    assert all(o["grad_equal"] for o in enc_ranks), enc_ranks
    assert all(o["grad_abs_sum"] > 0 for o in enc_ranks)
    assert all(o["loss_equal"] for o in outs)
    print(f"{case}: loss {outs[0]['loss']} (equal to the reference on every rank), plan {outs[0]['plan_strategy']}")
