"""Nothing ties the wheel to one CPython (tests/python/check_abi.sh --strict): no compiled CPython module,
and no shipped binary (libzipccl.so, the plugin, the tool) imports a CPython symbol. The script itself
is checked on numpy's extension module, which it must refuse."""
import os
import shutil
import subprocess

import pytest

import zipccl

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_abi.sh")


def check(*args):
    return subprocess.run([CHECK, *args], capture_output=True, text=True, timeout=300)


def test_nothing_ties_the_wheel_to_one_cpython():
    target = os.environ.get("ZIPCCL_WHEEL") or os.path.dirname(zipccl.__file__)
    r = check("--strict", target)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "abi: 0 compiled CPython module(s), 0 file(s) importing CPython symbols (strict;" in r.stdout
    # The shipped binaries are among the files it looked at (in the wheel, or in the installed package).
    here = os.path.dirname(zipccl.__file__)
    for binary in ("lib/libzipccl.so", "lib/libnccl-net-zipccl.so", "bin/zipccl"):
        r = check("--strict", os.path.join(here, binary))
        assert r.returncode == 0 and "(strict; 1 files)" in r.stdout, r.stdout + r.stderr


def test_the_check_refuses_a_cpython_extension(tmp_path):
    pytest.importorskip("numpy")
    try:
        from numpy.core import _multiarray_umath as ext
    except ImportError:  # numpy 2
        from numpy._core import _multiarray_umath as ext
    r = check("--strict", ext.__file__)
    assert r.returncode == 1 and "cannot be py3-none" in r.stderr, r.stdout + r.stderr
    assert "abi: 1 compiled CPython module(s), 1 file(s) importing CPython symbols" in r.stdout
    # By any name: Python imports a plain foo.so as well; it is known by PyInit_.
    plain = tmp_path / "plain.so"
    shutil.copy(ext.__file__, plain)
    r = check("--strict", str(plain))
    assert r.returncode == 1 and "plain.so (defines PyInit_)" in r.stdout, r.stdout
    r = check("--report", str(plain))
    assert r.returncode == 0 and "would block py3-none" in r.stdout
