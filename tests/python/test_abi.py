"""What ties the wheel to one CPython (tests/python/check_abi.sh): today exactly the native module
_zipccl, a CPython extension; the plugin and the tool import no CPython symbol. When the native part
becomes a plain C API library (issue 34), this expects nothing and the script runs --strict."""
import os
import subprocess

import zipccl

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_abi.sh")


def test_only_the_native_module_ties_the_wheel_to_one_cpython():
    target = os.environ.get("ZIPCCL_WHEEL") or os.path.dirname(zipccl.__file__)
    r = subprocess.run([CHECK, "--report", target], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    modules = [l for l in lines if l.startswith("compiled CPython module: ")]
    importers = [l.split(" imports ")[0] for l in lines if " imports " in l]
    assert len(modules) == 1 and "/_zipccl.cpython-" in modules[0], r.stdout
    assert len(importers) == 1 and "/_zipccl.cpython-" in importers[0], r.stdout
    assert "abi: 1 compiled CPython module(s), 1 file(s) importing CPython symbols (report;" in r.stdout
    assert "would block py3-none" in r.stdout
    # --strict is what the C API switch turns on: it refuses this wheel today.
    strict = subprocess.run([CHECK, "--strict", target], capture_output=True, text=True, timeout=300)
    assert strict.returncode == 1 and "cannot be py3-none" in strict.stderr
