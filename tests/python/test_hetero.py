"""zipccl.hetero on torch.distributed (gloo): Layout as the C++ library validates it, and jobs of 4
and 8 processes whose LLM input and encoder gradients equal an undistributed run bit for bit."""
import json
import os
import signal
import subprocess
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
    """The job's ranks, forked by one process (hetero_worker.py); their results."""
    store, outdir = tmp_path / "store", tmp_path / "ranks"
    outdir.mkdir()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    start = time.perf_counter()
    # A session of its own: on a timeout the launcher and every rank it forked are killed together.
    launcher = subprocess.Popen(spawn.python(WORKER, str(world), case, str(store), str(outdir)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)
    try:
        _, err = launcher.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.communicate()
        raise
    rank_errs = {r: (outdir / f"rank{r}.err").read_text() for r in range(world) if (outdir / f"rank{r}.err").exists()}
    assert launcher.returncode == 0, err[-3000:] + "".join(
        f"\n--- rank {r} ---\n{e[-3000:]}" for r, e in rank_errs.items() if e)
    outs = [json.loads((outdir / f"rank{r}.out").read_text().strip().splitlines()[-1]) for r in range(world)]
    assert [o["rank"] for o in outs] == list(range(world))
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
