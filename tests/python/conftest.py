import os
import subprocess
import sys

import pytest


@pytest.fixture(scope="session")
def tool_compress(tmp_path_factory):
    """Runs the C++ tool's `zipccl compress` (the one in the installed wheel) on bytes."""
    import zipccl

    d = tmp_path_factory.mktemp("tool")

    def run(data: bytes, dtype: str = "auto", *extra: str) -> bytes:
        src, dst = d / "in", d / "out"
        src.write_bytes(data)
        subprocess.run([zipccl.tool_path(), "compress", "-f", "-t", dtype, *extra, str(src), str(dst)], check=True)
        return dst.read_bytes()

    return run


def pytest_report_header(config):
    import zipccl

    return f"zipccl {zipccl.__version__} from {os.path.dirname(zipccl.__file__)} (python {sys.version.split()[0]})"
