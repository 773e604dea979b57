"""`import zipccl`, enable() and plugin_path() are pure Python: no numpy, no C API library (libzipccl.so),
so they work on an interpreter without numpy. The codec loads both at its first use."""
import os
import subprocess
import sys

import spawn
import zipccl

ENABLE_ONLY = (
    "import sys, zipccl\n"
    "print(zipccl.plugin_path())\n"
    "env = zipccl.enable(min_bytes=65536, socket_nthreads=2)\n"
    "print(zipccl.__version__, env['ZIPCCL_MIN_BYTES'])\n"
    "print(sorted(m for m in ('zipccl._capi', 'zipccl._codec', 'numpy') if m in sys.modules))\n"
    "print(sorted({l.split('/')[-1].strip() for l in open('/proc/self/maps') if 'libzipccl' in l}))\n"
)


def run(python, code, **kw):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZIPCCL_", "NCCL_"))}
    env.update(kw.pop("env", {}))
    return subprocess.run(spawn.program(python, "-c", code), capture_output=True, text=True, timeout=120, env=env, **kw)


def test_import_and_enable_load_neither_numpy_nor_the_native_library():
    r = run(sys.executable, ENABLE_ONLY)
    assert r.returncode == 0, r.stderr
    path, version, loaded, mapped = r.stdout.splitlines()
    assert path == zipccl.plugin_path()
    assert version == f"{zipccl.__version__} 65536"
    assert loaded == "[]"
    assert mapped == "[]"  # libzipccl.so is not in the process


def test_the_codec_loads_the_native_library_at_its_first_use():
    code = ("import sys, zipccl\n"
            "maps = lambda: sorted({l.split('/')[-1].strip() for l in open('/proc/self/maps') if 'libzipccl' in l})\n"
            "assert 'zipccl._capi' not in sys.modules and maps() == []\n"
            "frame = zipccl.compress(bytes(range(256)) * 64)\n"
            "assert zipccl.decompress(frame).tobytes() == bytes(range(256)) * 64\n"
            "from zipccl import FormatError, frames\n"
            "assert FormatError is sys.modules['zipccl._capi']._ERRORS[-7]  # what a corrupt frame raises\n"
            "print(zipccl.simd_path(), len(frames(frame)), 'compress' in dir(zipccl), maps())\n")
    r = run(sys.executable, code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[1:] == ["1", "True", "['libzipccl.so']"]


def test_setting_names_are_the_registrys():
    # _settings.py is written by the build from the registry; the C API library reads the registry itself.
    from zipccl import _capi, _settings

    assert list(_settings.NAMES) == list(_capi.setting_names())
    assert "ZIPCCL_COMPRESS" in _settings.NAMES and "ZIPCCL_MIN_BYTES" in _settings.NAMES


def test_version_is_the_native_librarys():
    from zipccl import _capi

    assert _capi.version().split(" ")[0] == zipccl.__version__


def test_enable_in_a_venv_without_numpy(tmp_path):
    # As on an interpreter without numpy: a fresh venv
    # without pip or site packages, with the installed package on PYTHONPATH.
    venv = tmp_path / "venv"
    subprocess.run(spawn.python("-m", "venv", "--without-pip", str(venv)), check=True, timeout=120)
    python = str(venv / "bin" / "python")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    os.symlink(os.path.dirname(zipccl.__file__), pkg / "zipccl")
    assert run(python, "import numpy").returncode != 0  # the check below would prove nothing
    r = run(python, ENABLE_ONLY, env={"PYTHONPATH": str(pkg)})
    assert r.returncode == 0, r.stderr
    path, version, loaded, mapped = r.stdout.splitlines()
    assert path == str(pkg / "zipccl" / "lib" / "libnccl-net-zipccl.so") and os.path.isfile(path)
    assert loaded == "[]" and mapped == "[]"
    # The codec then says what it misses.
    r = run(python, "import zipccl; zipccl.compress(b'x')", env={"PYTHONPATH": str(pkg)})
    assert r.returncode != 0 and "No module named 'numpy'" in r.stderr
