"""Turning the plugin on from Python: enable(), the environment a fresh process sees, the plugin as
NCCL loads it, the warnings, and stats() from a real plugin run."""
import json
import os
import subprocess
import sys
import warnings

import pytest

import spawn
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
    assert zipccl.enable("auto", ib_qps=2)["ZIPCCL_IB_QPS"] == "2"



def _enable_recording(*args, **kwargs):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        env = zipccl.enable(*args, **kwargs)
    return env, [str(w.message) for w in record]


def test_enable_wraps_the_nccl_net_plugin_it_replaces(clean_env, monkeypatch):
    # On EFA nodes NCCL_NET_PLUGIN=ofi: replacing it would move the traffic to TCP.
    monkeypatch.setenv("NCCL_NET_PLUGIN", "ofi")
    env, said = _enable_recording()
    # ofi stays on NCCL's list after zipccl: where zipccl steps aside, NCCL goes on with it.
    assert env["NCCL_NET_PLUGIN"] == os.environ["NCCL_NET_PLUGIN"] == zipccl.plugin_path() + ",ofi"
    assert env["ZIPCCL_NET_INNER"] == os.environ["ZIPCCL_NET_INNER"] == "ofi"
    assert said == ["zipccl.enable: NCCL_NET_PLUGIN=ofi (environment) becomes ZIPCCL_NET_INNER=ofi: "
                    "zipccl compresses over it"]
    # Again in the same process: NCCL_NET_PLUGIN is zipccl now, the inner plugin stays, nothing said.
    env, said = _enable_recording()
    assert env["ZIPCCL_NET_INNER"] == "ofi" and said == []
    assert env["NCCL_NET_PLUGIN"] == zipccl.plugin_path() + ",ofi"


def test_enable_wraps_the_nccl_net_plugin_of_a_configuration_file(clean_env, monkeypatch):
    conf = clean_env / "nccl.conf"
    conf.write_text("NCCL_NET_PLUGIN = ofi  # EFA\n")
    monkeypatch.setenv("NCCL_CONF_FILE", str(conf))
    env, said = _enable_recording()
    assert env["ZIPCCL_NET_INNER"] == os.environ["ZIPCCL_NET_INNER"] == "ofi"
    assert said == [f"zipccl.enable: NCCL_NET_PLUGIN=ofi ({conf}) becomes ZIPCCL_NET_INNER=ofi: "
                    "zipccl compresses over it"]
    # The environment wins over the file, as in NCCL; the file's other plugin is still pointed out.
    monkeypatch.setenv("NCCL_NET_PLUGIN", "/opt/efa/libnccl-net.so")
    monkeypatch.delenv("ZIPCCL_NET_INNER")
    env, said = _enable_recording()
    assert env["ZIPCCL_NET_INNER"] == "/opt/efa/libnccl-net.so"
    assert said[0].startswith("zipccl.enable: NCCL_NET_PLUGIN=/opt/efa/libnccl-net.so (environment) becomes")
    assert any(f"{conf} sets NCCL_NET_PLUGIN=ofi" in s for s in said[1:])


def test_enable_never_wraps_zipccl_itself(clean_env, monkeypatch):
    link = clean_env / "libnccl-net-mine.so"
    link.symlink_to(zipccl.plugin_path())
    monkeypatch.setenv("NCCL_NET_PLUGIN", f"zipccl, {link},ofi,{zipccl.plugin_path()},libnccl-net-zipccl.so")
    env, said = _enable_recording()
    assert env["ZIPCCL_NET_INNER"] == "ofi"
    assert said == [f"zipccl.enable: NCCL_NET_PLUGIN=zipccl, {link},ofi,{zipccl.plugin_path()},libnccl-net-zipccl.so "
                    "(environment) becomes ZIPCCL_NET_INNER=ofi: zipccl compresses over it"]
    for alone in ("zipccl", "libnccl-net-zipccl.so", zipccl.plugin_path(), str(link), f"{link},zipccl", "None",
                  ""):
        monkeypatch.setenv("NCCL_NET_PLUGIN", alone)
        monkeypatch.delenv("ZIPCCL_NET_INNER", raising=False)
        env, said = _enable_recording()
        assert "ZIPCCL_NET_INNER" not in env and "ZIPCCL_NET_INNER" not in os.environ, alone
        assert said == [], alone


def test_enable_inner_argument_chooses(clean_env, monkeypatch):
    monkeypatch.setenv("NCCL_NET_PLUGIN", "ofi")
    for opt_out in ({"inner": None}, {"net_inner": None}, {"inner": "none"}, {"inner": []}):
        env, said = _enable_recording(**opt_out)
        assert env["ZIPCCL_NET_INNER"] == os.environ["ZIPCCL_NET_INNER"] == "none", opt_out
        assert said == [], opt_out
        monkeypatch.setenv("NCCL_NET_PLUGIN", "ofi")
    assert zipccl.enable(inner="ib-vendor")["ZIPCCL_NET_INNER"] == "ib-vendor"
    assert zipccl.enable(net_inner="ib-vendor")["ZIPCCL_NET_INNER"] == "ib-vendor"
    assert zipccl.enable(inner=["ofi", "/opt/x/libnccl-net.so"])["ZIPCCL_NET_INNER"] == "ofi,/opt/x/libnccl-net.so"
    with pytest.raises(TypeError, match="inner= and net_inner="):
        zipccl.enable(inner="ofi", net_inner="ofi")
    with pytest.raises(TypeError, match="inner= takes"):
        zipccl.enable(inner=3)


def test_enable_keeps_an_explicit_zipccl_net_inner(clean_env, monkeypatch):
    monkeypatch.setenv("NCCL_NET_PLUGIN", "ofi")
    monkeypatch.setenv("ZIPCCL_NET_INNER", "ofi")
    env, said = _enable_recording()
    assert env["ZIPCCL_NET_INNER"] == "ofi" and said == []
    monkeypatch.setenv("NCCL_NET_PLUGIN", "ofi")
    monkeypatch.setenv("ZIPCCL_NET_INNER", "none")
    env, said = _enable_recording()
    assert env["ZIPCCL_NET_INNER"] == os.environ["ZIPCCL_NET_INNER"] == "none"
    assert said == ["zipccl.enable: NCCL_NET_PLUGIN=ofi (environment) is not wrapped: ZIPCCL_NET_INNER=none "
                    "(environment) is kept; pass inner= to choose"]
    # From a configuration file too (NCCL sets the plugin's variables from it as well).
    conf = clean_env / "nccl.conf"
    conf.write_text("ZIPCCL_NET_INNER=/opt/x/libnccl-net.so\n")
    monkeypatch.setenv("NCCL_CONF_FILE", str(conf))
    monkeypatch.delenv("ZIPCCL_NET_INNER")
    monkeypatch.setenv("NCCL_NET_PLUGIN", "ofi")
    env, said = _enable_recording()
    assert env["ZIPCCL_NET_INNER"] == "/opt/x/libnccl-net.so"
    assert len(said) == 1 and f"ZIPCCL_NET_INNER=/opt/x/libnccl-net.so ({conf}) is kept" in said[0]
    # An argument wins over what is set.
    monkeypatch.setenv("NCCL_NET_PLUGIN", "ofi")
    assert zipccl.enable(inner="ofi")["ZIPCCL_NET_INNER"] == os.environ["ZIPCCL_NET_INNER"] == "ofi"

def test_a_fresh_process_loading_the_plugin_as_nccl_does_finds_zipccl(clean_env):
    zipccl.enable()
    # The child does not import zipccl: it sees only the environment enable() left.
    r = subprocess.run(spawn.python("-c", NCCL_LIKE_LOADER), capture_output=True, text=True, timeout=60)
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
    r = subprocess.run(spawn.python("-c", code), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("1 ") and "before init_process_group" in r.stdout


def test_warns_when_nccl_has_loaded_a_net_plugin_not_for_libnccl_alone(clean_env):
    # `import torch` maps NCCL's own library long before NCCL initialises: no warning for that. A net
    # plugin mapped means NCCL initialised and read NCCL_NET_PLUGIN already: a warning.
    src = clean_env / "nccl_stub.c"
    src.write_text("int ncclGetVersion(int* v) { *v = 0; return 0; }\n")
    nccl = clean_env / "libnccl.so.2"
    net = clean_env / "libnccl-net-other.so"
    for lib in (nccl, net):
        if subprocess.run([spawn.CC, "-shared", "-fPIC", "-o", str(lib), str(src)]).returncode != 0:
            pytest.fail("no C compiler (tools/test.sh installs one)")
    code = ("import ctypes, warnings, zipccl\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            f"    ctypes.CDLL({str(nccl)!r})\n"
            "    zipccl.enable()\n"
            "    n0 = len(w)\n"
            f"    ctypes.CDLL({str(net)!r})\n"
            "    zipccl.enable()\n"
            "print(n0, len(w), w[-1].message if w else '')\n")
    r = subprocess.run(spawn.python("-c", code), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("0 1 ") and "already loaded a net plugin" in r.stdout, r.stdout


def test_stats_reads_the_plugins_records_from_a_real_run(clean_env):
    stats = clean_env / "stats.jsonl"
    zipccl.enable("always", stats_file=str(stats))
    assert zipccl.stats() == []
    # Two processes send 1 MiB messages through the wheel's plugin (the tool's perf driver; raw
    # messages: what is tested here is the statistics file, the codec has its own tests).
    r = subprocess.run(spawn.program(zipccl.tool_path(), "perf", "--plugin", zipccl.plugin_path(), "--modes", "never",
                        "--seconds", "0.3", "--size", "1M", "--no-baseline"), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    records = zipccl.stats()
    assert records, "the plugin wrote no statistics"
    assert all(isinstance(rec, dict) for rec in records)
    assert records == [json.loads(line) for line in stats.read_text().splitlines() if line.strip()]
    with pytest.raises(ValueError):
        os.environ.pop("ZIPCCL_STATS_FILE")
        zipccl.stats()
