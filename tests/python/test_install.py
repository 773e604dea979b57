"""The package as pip installed it: imported from the venv, carrying the plugin and the tool."""
import os
import subprocess
import sys
import zipfile

import zipccl


def test_imported_from_the_installed_wheel_not_the_source_tree():
    here = os.path.dirname(os.path.abspath(zipccl.__file__))
    assert here.startswith(os.path.realpath(sys.prefix)) or here.startswith(sys.prefix), here
    assert "site-packages" in here


def test_wheel_carries_plugin_and_tool():
    wheel = os.environ.get("ZIPCCL_WHEEL")
    if wheel:
        names = zipfile.ZipFile(wheel).namelist()
        assert "zipccl/lib/libnccl-net-zipccl.so" in names
        assert "zipccl/bin/zipccl" in names
        assert "-manylinux_2_28_x86_64" in wheel or "manylinux_2_28_x86_64.whl" in wheel
    assert os.path.isabs(zipccl.plugin_path()) and os.path.isfile(zipccl.plugin_path())
    assert os.access(zipccl.tool_path(), os.X_OK)


def test_python_m_zipccl_runs_the_tool():
    r = subprocess.run([sys.executable, "-m", "zipccl", "--version"], capture_output=True, text=True, check=True)
    assert r.stdout.startswith("zipccl " + zipccl.__version__)
    r = subprocess.run([sys.executable, "-m", "zipccl", "no-such-command"], capture_output=True, text=True)
    assert r.returncode != 0 and "no-such-command" in r.stderr


def test_native_stub_names_what_the_module_has():
    import ast

    from zipccl import _zipccl

    stub = os.path.join(os.path.dirname(zipccl.__file__), "_zipccl.pyi")
    tree = ast.parse(open(stub).read())
    declared = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    present = {n for n in dir(_zipccl) if not n.startswith("_")}
    assert declared == present
    assert os.path.isfile(os.path.join(os.path.dirname(zipccl.__file__), "py.typed"))
