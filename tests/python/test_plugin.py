"""Turning the plugin on from Python: enable(), the environment a fresh process sees, the plugin as
NCCL loads it, the warnings, and stats() from a real plugin run."""
import json
import os
import subprocess
import sys
import warnings

import pytest

import zipccl

# What NCCL does with NCCL_NET_PLUGIN (src/plugin/net.cc): dlopen the value (a path is used as
# is), then look up the newest ncclNetPlugin_vN table it knows, then call its init and devices.
NCCL_LIKE_LOADER = r"""
import ctypes, os, sys
lib = ctypes.CDLL(os.environ["NCCL_NET_PLUGIN"], mode=os.RTLD_NOW | os.RTLD_LOCAL)
for version in (12, 11, 10, 9, 8, 7):
    try:
        table = ctypes.c_void_p.in_dll(lib, f"ncclNetPlugin_v{version}")
        break
    except ValueError:
        continue
else:
    sys.exit("no ncclNetPlugin_v* table")
# Every version from v7: { const char* name; init(...); devices(int*); ... }
fields = (ctypes.c_void_p * 3).from_address(ctypes.addressof(table))
name = ctypes.string_at(fields[0]).decode()
Logger = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p)
logger = Logger(lambda *a: None)
if version >= 11:  # init(void** ctx, uint64_t commId, ncclNetCommConfig_t* config, logger, profiler)
    init = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64, ctypes.c_void_p,
                            Logger, ctypes.c_void_p)(fields[1])
    ctx = ctypes.c_void_p()
    rc = init(ctypes.byref(ctx), 1, None, logger, None)
elif version == 10:  # init(logger, profiler)
    rc = ctypes.CFUNCTYPE(ctypes.c_int, Logger, ctypes.c_void_p)(fields[1])(logger, None)
else:  # init(logger)
    rc = ctypes.CFUNCTYPE(ctypes.c_int, Logger)(fields[1])(logger)
n = ctypes.c_int(-1)
rc2 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))(fields[2])(ctypes.byref(n))
print(f"{name} v{version} init={rc} devices={rc2} ndev={n.value}")
"""


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for k in list(os.environ):
        if k.startswith(("ZIPCCL_", "NCCL_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("NCCL_CONF_FILE", str(tmp_path / "no-nccl.conf"))
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_enable_sets_the_environment(clean_env):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = zipccl.enable("always", stats_file="stats.jsonl", min_bytes=65536, socket_nthreads=2)
    assert os.environ["NCCL_NET_PLUGIN"] == zipccl.plugin_path() == env["NCCL_NET_PLUGIN"]
    assert os.path.isabs(env["NCCL_NET_PLUGIN"])
    assert os.environ["ZIPCCL_COMPRESS"] == "always"
    assert os.environ["ZIPCCL_MIN_BYTES"] == "65536"
    assert os.environ["ZIPCCL_SOCKET_NTHREADS"] == "2"
    assert os.environ["ZIPCCL_STATS_FILE"] == os.path.abspath("stats.jsonl")
    with pytest.raises(ValueError, match="policy"):
        zipccl.enable("sometimes")
    with pytest.raises(TypeError, match="min_byte"):
        zipccl.enable(min_byte=1)
    # The names come from the plugin's own registry: a setting added there is accepted here.
    assert zipccl.enable("auto", net_inner="ofi")["ZIPCCL_NET_INNER"] == "ofi"


def test_a_fresh_process_loading_the_plugin_as_nccl_does_finds_zipccl(clean_env):
    zipccl.enable()
    # The child does not import zipccl: it sees only the environment enable() left.
    r = subprocess.run([sys.executable, "-c", NCCL_LIKE_LOADER], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    name, version, init, devices, ndev = r.stdout.split()
    assert name == "zipccl" and int(version[1:]) >= 11  # the newest table NCCL 2.27+ looks for
    assert init == "init=0" and devices == "devices=0" and int(ndev.split("=")[1]) >= 1


def test_warns_when_nccl_conf_disagrees(clean_env, monkeypatch):
    conf = clean_env / "nccl.conf"
    conf.write_text("# site settings\nNCCL_NET_PLUGIN=/opt/other/libnccl-net.so\nNCCL_NET=IB\n")
    monkeypatch.setenv("NCCL_CONF_FILE", str(conf))
    with pytest.warns(RuntimeWarning) as record:
        zipccl.enable()
    text = " ".join(str(w.message) for w in record)
    assert "NCCL_NET_PLUGIN=/opt/other/libnccl-net.so" in text and "NCCL_NET=IB" in text


def test_warns_when_a_process_group_already_exists(clean_env):
    # In a fresh interpreter: a process group (gloo, world of 1) made before enable().
    code = (
        "import warnings, torch.distributed as dist, zipccl\n"
        "dist.init_process_group('gloo', init_method='file://{}', rank=0, world_size=1)\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    zipccl.enable()\n"
        "print(len(w), w[0].message if w else '')\n"
    ).format(clean_env / "store")
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("1 ") and "before init_process_group" in r.stdout


def test_warns_when_libnccl_is_already_loaded(clean_env):
    # A stand-in named like NCCL's library: enable() looks for libnccl.so in the process's maps.
    src = clean_env / "nccl_stub.c"
    src.write_text("int ncclGetVersion(int* v) { *v = 0; return 0; }\n")
    lib = clean_env / "libnccl.so.2"
    if subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)]).returncode != 0:
        pytest.skip("no C compiler")
    code = ("import ctypes, warnings, zipccl\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    zipccl.enable()\n"
            "    n0 = len(w)\n"
            f"    ctypes.CDLL({str(lib)!r})\n"
            "    zipccl.enable()\n"
            "print(n0, len(w), w[-1].message if w else '')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("0 1 ") and "NCCL is already loaded" in r.stdout


def test_stats_reads_the_plugins_records_from_a_real_run(clean_env):
    stats = clean_env / "stats.jsonl"
    zipccl.enable("always", stats_file=str(stats))
    assert zipccl.stats() == []
    # Two processes send 1 MiB messages through the wheel's plugin (the tool's perf driver; raw
    # messages: what is tested here is the statistics file, the codec has its own tests).
    r = subprocess.run([sys.executable, "-m", "zipccl", "perf", "--plugin", zipccl.plugin_path(), "--modes", "never",
                        "--seconds", "0.3", "--size", "1M", "--no-baseline"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    records = zipccl.stats()
    assert records, "the plugin wrote no statistics"
    assert all(isinstance(rec, dict) for rec in records)
    assert records == [json.loads(line) for line in stats.read_text().splitlines() if line.strip()]
    with pytest.raises(ValueError):
        os.environ.pop("ZIPCCL_STATS_FILE")
        zipccl.stats()
