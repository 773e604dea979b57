import os
import subprocess
import sys

import pytest

import spawn


@pytest.fixture(scope="session")
def tool_compress(tmp_path_factory):
    """Runs the C++ tool's `zipccl compress` (the one in the installed wheel) on bytes."""
    import zipccl

    d = tmp_path_factory.mktemp("tool")

    def run(data: bytes, dtype: str = "auto", *extra: str) -> bytes:
        src, dst = d / "in", d / "out"
        src.write_bytes(data)
        subprocess.run(spawn.program(zipccl.tool_path(), "compress", "-f", "-t", dtype, *extra, str(src), str(dst)),
                       check=True)
        return dst.read_bytes()

    return run


# What some tests import and would skip without (pytest.importorskip). In CI (CI set, as .ci/run
# does) a missing one fails the run instead: tools/test.sh installs them, so a skip there is a defect.
NEEDED_IN_CI = ("torch", "numpy", "ml_dtypes")


def pytest_configure(config):
    if os.environ.get("CI", "").lower() in ("", "0", "false", "no"):
        return
    import importlib

    missing = []
    for name in NEEDED_IN_CI:
        try:
            importlib.import_module(name)
        except ImportError as e:
            missing.append(f"{name} ({e})")
    if missing:
        raise pytest.UsageError(f"CI={os.environ['CI']}: the Python tests need {', '.join(missing)}; "
                                "tools/test.sh installs them (python3-torch, python3-numpy; ml_dtypes from PyPI)")


def pytest_report_header(config):
    import zipccl

    lines = [f"zipccl {zipccl.__version__} from {os.path.dirname(zipccl.__file__)} (python {sys.version.split()[0]})"]
    if spawn.EMULATOR:
        lines.append(f"child processes through {' '.join(spawn.EMULATOR)}")
    return lines
