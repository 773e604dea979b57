"""Turning the NCCL net plugin on from Python, and reading its statistics."""
import json
import os
import sys
import warnings
from typing import Any, Dict, List, Optional

from . import _zipccl
from ._paths import plugin_path

# The names the plugin reads (plugin/src/common/settings.cpp's registry, through the native module),
# without ZIPCCL_: enable() refuses others, so a typo is an error instead of a setting silently ignored.
_SETTINGS = tuple(n[len("ZIPCCL_"):] for n in _zipccl.setting_names() if n.startswith("ZIPCCL_"))
_POLICIES = ("auto", "always", "never")
PLUGIN_NAME = "zipccl"


def _nccl_conf_files() -> List[str]:
    # The files NCCL reads its settings from, in its order: NCCL_CONF_FILE or ~/.nccl.conf, then
    # /etc/nccl.conf. A variable already in the environment wins over both.
    own = os.environ.get("NCCL_CONF_FILE") or os.path.join(os.path.expanduser("~"), ".nccl.conf")
    return [own, "/etc/nccl.conf"]


def _read_conf(path: str) -> Dict[str, str]:
    out: Dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if "=" in line:
                    k, v = line.split("=", 1)
                    out[k.strip()] = v.strip()
    except OSError:
        pass
    return out


def _nccl_loaded() -> bool:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return any("libnccl.so" in line or "libnccl_static" in line for line in f)
    except OSError:
        return False


def _torch_process_group_exists() -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    dist = getattr(torch, "distributed", None)
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:  # an odd torch build: no process group to speak of
        return False


def enable(policy: str = "auto", *, stats_file: Optional[str] = None, **settings: Any) -> Dict[str, str]:
    """Makes NCCL in this process (and the processes it starts) use zipccl's net plugin.

    Call before ``torch.distributed.init_process_group``: sets ``NCCL_NET_PLUGIN`` to this wheel's
    plugin (absolute path), ``ZIPCCL_COMPRESS`` to ``policy`` (auto, always, never),
    ``ZIPCCL_STATS_FILE`` to ``stats_file`` when given, and ``ZIPCCL_<NAME>`` for each keyword
    (``enable(min_bytes=65536, codec_isa="avx2")``; see ``zipccl doctor``). Returns the variables
    set. Warns when NCCL is already loaded or a process group exists (NCCL reads the plugin setting
    once, at its first communicator), and when an NCCL configuration file or ``NCCL_NET`` chooses
    something else.
    """
    if policy not in _POLICIES:
        raise ValueError(f"zipccl.enable: policy must be one of {', '.join(_POLICIES)}; not {policy!r}")
    path = plugin_path()
    if not os.path.isfile(path):
        raise FileNotFoundError(f"zipccl.enable: the plugin is missing from the package: {path}")
    env = {"NCCL_NET_PLUGIN": path, "ZIPCCL_COMPRESS": policy}
    if stats_file is not None:
        env["ZIPCCL_STATS_FILE"] = os.path.abspath(stats_file)
    for key, value in settings.items():
        name = key.upper()
        if name not in _SETTINGS or name in ("COMPRESS", "STATS_FILE"):
            raise TypeError(f"zipccl.enable: unknown setting {key!r} (known: "
                            f"{', '.join(s.lower() for s in _SETTINGS if s not in ('COMPRESS', 'STATS_FILE'))})")
        if isinstance(value, bool):
            value = int(value)
        env["ZIPCCL_" + name] = str(value)

    if _nccl_loaded() or _torch_process_group_exists():
        warnings.warn("zipccl.enable: NCCL is already loaded or a torch.distributed process group exists in "
                      "this process; NCCL reads NCCL_NET_PLUGIN when it creates its first communicator, so "
                      "communicators made before now do not use zipccl. Call enable() before "
                      "init_process_group.", RuntimeWarning, stacklevel=2)
    for conf in _nccl_conf_files():
        values = _read_conf(conf)
        other = values.get("NCCL_NET_PLUGIN")
        if other is not None and other != path:
            warnings.warn(f"zipccl.enable: {conf} sets NCCL_NET_PLUGIN={other}; this process's environment wins, "
                          "but processes started without zipccl.enable() load that plugin instead",
                          RuntimeWarning, stacklevel=2)
        net = values.get("NCCL_NET")
        if net is not None and net != PLUGIN_NAME and "NCCL_NET" not in os.environ:
            warnings.warn(f"zipccl.enable: {conf} sets NCCL_NET={net}: NCCL will pick that network, not "
                          f"'{PLUGIN_NAME}'", RuntimeWarning, stacklevel=2)
    net = os.environ.get("NCCL_NET")
    if net is not None and net != PLUGIN_NAME:
        warnings.warn(f"zipccl.enable: NCCL_NET={net} is set: NCCL will pick that network, not '{PLUGIN_NAME}'",
                      RuntimeWarning, stacklevel=2)
    os.environ.update(env)
    return env


def stats(path: Optional[str] = None) -> List[Dict[str, Any]]:
    """The plugin's per-connection statistics: one dict per JSON line of ``ZIPCCL_STATS_FILE`` (or
    ``path``), as the plugin appends them when a connection closes. [] when there are none yet."""
    path = path or os.environ.get("ZIPCCL_STATS_FILE")
    if not path:
        raise ValueError("zipccl.stats: no statistics file: pass enable(stats_file=...) or path=")
    try:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []
