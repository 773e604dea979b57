"""The README's examples (tools/python/examples) run as printed: the codec one, and the hetero one
as a 4-process gloo job. The enable() + DDP example needs GPUs and NCCL (device script)."""
import os
import socket
import subprocess
import sys

import pytest

import spawn

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "python", "examples")


def test_codec_example():
    pytest.importorskip("torch")
    r = subprocess.run(spawn.python(os.path.join(EXAMPLES, "codec.py")), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "(1.50" in r.stdout and "FormatError: frame 0 at byte 0" in r.stdout


def test_hetero_example_on_4_gloo_processes():
    pytest.importorskip("torch")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen(spawn.python(os.path.join(EXAMPLES, "hetero_boundary.py")), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, RANK=str(r), WORLD_SIZE="4", MASTER_ADDR="127.0.0.1",
                                       MASTER_PORT=str(port), OMP_NUM_THREADS="1")) for r in range(4)]
    lines = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
        lines.append(out.strip())
    # Encoder tp1 dp4 holds 8+10+8+10 rows of the 36; each LLM tp pair gets its dp half, replicated.
    assert [line.split(":")[1].split(", grad")[0] for line in lines] == [
        " encoder rows 8 -> LLM input (18, 16)", " encoder rows 10 -> LLM input (18, 16)",
        " encoder rows 8 -> LLM input (18, 16)", " encoder rows 10 -> LLM input (18, 16)"]
    # After the dp all-reduce every encoder replica has the same gradient.
    assert len({line.split("grad norm ")[1] for line in lines}) == 1
