"""Turning the NCCL net plugin on from Python, and reading its statistics."""
import os
import sys
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _settings
from ._paths import plugin_path

# The names the plugin reads (plugin/src/common/settings.cpp's registry, written into _settings.py by
# the build), without ZIPCCL_: enable() refuses others, so a typo is an error instead of a setting
# silently ignored. Pure Python: enable() loads neither libzipccl.so nor numpy.
_SETTINGS = tuple(n[len("ZIPCCL_"):] for n in _settings.NAMES if n.startswith("ZIPCCL_"))
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


def _nccl_setting(name: str) -> Optional[Tuple[str, str]]:
    # (value, where) of `name` as NCCL settles it: the environment, else the first configuration file
    # that sets it (NCCL's setenv does not overwrite). None when nothing sets it.
    if name in os.environ:
        return os.environ[name], "environment"
    for conf in _nccl_conf_files():
        value = _read_conf(conf).get(name)
        if value is not None:
            return value, conf
    return None


def _plugin_list(value: str) -> List[str]:
    # As NCCL reads NCCL_NET_PLUGIN (and the plugin ZIPCCL_NET_INNER): comma-separated names or paths,
    # blanks around them dropped; "none" (any case) names no plugin.
    return [v.strip() for v in value.split(",") if v.strip() and v.strip().lower() != "none"]


def _is_this_plugin(entry: str, path: str) -> bool:
    # NCCL resolves a name to libnccl-net-<name>.so; a path may be a symlink to the wheel's copy.
    if entry in (PLUGIN_NAME, os.path.basename(path)):
        return True
    try:
        return os.path.samefile(entry, path)
    except OSError:
        return False


def _other_plugins(value: str, path: str) -> List[str]:
    return [e for e in _plugin_list(value) if not _is_this_plugin(e, path)]


class _FromNccl:
    def __repr__(self) -> str:
        return "<from NCCL_NET_PLUGIN>"


_FROM_NCCL: Any = _FromNccl()


def _inner_from_nccl(path: str) -> Tuple[Optional[str], Optional[str]]:
    # (ZIPCCL_NET_INNER to set, the warning that says so) for the plugin NCCL would load now, without
    # zipccl's own entries: zipccl never wraps itself. A ZIPCCL_NET_INNER already set is kept.
    plugin = _nccl_setting("NCCL_NET_PLUGIN")
    wrap = _other_plugins(plugin[0], path) if plugin else []
    explicit = _nccl_setting("ZIPCCL_NET_INNER")
    if explicit is not None:
        if plugin and wrap and _plugin_list(explicit[0]) != wrap:
            return explicit[0], (f"zipccl.enable: NCCL_NET_PLUGIN={plugin[0]} ({plugin[1]}) is not wrapped: "
                                 f"ZIPCCL_NET_INNER={explicit[0]} ({explicit[1]}) is kept; pass inner= to choose")
        return explicit[0], None
    if not plugin or not wrap:
        return None, None
    inner = ",".join(wrap)
    return inner, (f"zipccl.enable: NCCL_NET_PLUGIN={plugin[0]} ({plugin[1]}) becomes ZIPCCL_NET_INNER={inner}: "
                   "zipccl compresses over it")


def _nccl_net_plugin_loaded() -> bool:
    # NCCL loads its net plugin (libnccl-net.so, libnccl-net-<name>.so) when it initialises, at the
    # first communicator or unique id: a mapped one means NCCL has read NCCL_NET_PLUGIN already. NCCL's
    # own library being mapped says nothing: `import torch` maps it long before any communicator.
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return any("libnccl-net" in line for line in f)
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


def enable(policy: str = "auto", *, stats_file: Optional[str] = None,
           inner: Union[None, str, Sequence[str]] = _FROM_NCCL, **settings: Any) -> Dict[str, str]:
    """Makes NCCL in this process (and the processes it starts) use zipccl's net plugin.

    Call before ``torch.distributed.init_process_group``: sets ``NCCL_NET_PLUGIN`` to this wheel's
    plugin (absolute path), ``ZIPCCL_COMPRESS`` to ``policy`` (auto, always, never),
    ``ZIPCCL_STATS_FILE`` to ``stats_file`` when given (the live snapshots then go to its folder too,
    unless ``ZIPCCL_STATS_DIR`` is set), and ``ZIPCCL_<NAME>`` for each keyword
    (``enable(min_bytes=65536, codec_isa="avx2")``; see ``zipccl doctor``). Returns the variables
    set. Warns when NCCL has already loaded a net plugin or a process group exists (NCCL reads the plugin setting
    once, at its first communicator), and when an NCCL configuration file or ``NCCL_NET`` chooses
    something else.

    ``inner``: the NCCL net plugin zipccl compresses over (``ZIPCCL_NET_INNER``): a name as
    ``NCCL_NET_PLUGIN`` takes it (``"ofi"``), a path, or a list tried in order. ``None`` wraps nothing
    (``ZIPCCL_NET_INNER=none``: zipccl's own transports). Left out, the plugin NCCL would have loaded
    (``NCCL_NET_PLUGIN`` from the environment, else from NCCL's configuration files) is kept under
    zipccl, without zipccl's own entries, with a warning that names it (e.g. ``ofi`` on EFA nodes, so
    that traffic stays on EFA); a ``ZIPCCL_NET_INNER`` already set is kept. ``net_inner=`` is the same
    setting; give one of the two. That plugin also stays in ``NCCL_NET_PLUGIN`` after zipccl's, so
    that where zipccl does not initialise (README "Which fabric?") NCCL goes on with it.
    """
    if policy not in _POLICIES:
        raise ValueError(f"zipccl.enable: policy must be one of {', '.join(_POLICIES)}; not {policy!r}")
    path = plugin_path()
    if not os.path.isfile(path):
        raise FileNotFoundError(f"zipccl.enable: the plugin is missing from the package: {path}")
    env = {"NCCL_NET_PLUGIN": path, "ZIPCCL_COMPRESS": policy}
    if stats_file is not None:
        env["ZIPCCL_STATS_FILE"] = os.path.abspath(stats_file)
    for key in [k for k in settings if k.upper() == "NET_INNER"]:
        if inner is not _FROM_NCCL:
            raise TypeError(f"zipccl.enable: inner= and {key}= both name ZIPCCL_NET_INNER; give one of them")
        inner = settings.pop(key)
    for key, value in settings.items():
        name = key.upper()
        if name not in _SETTINGS or name in ("COMPRESS", "STATS_FILE"):
            raise TypeError(f"zipccl.enable: unknown setting {key!r} (known: "
                            f"{', '.join(s.lower() for s in _SETTINGS if s not in ('COMPRESS', 'STATS_FILE'))})")
        if isinstance(value, bool):
            value = int(value)
        env["ZIPCCL_" + name] = str(value)
    # The plugin NCCL would load without zipccl stays on NCCL's list after it: where zipccl does not
    # initialise (it steps aside rather than take GPUDirect or a device-side transport away, or the
    # plugin has no device here), NCCL goes on with that plugin instead of its own TCP.
    replaced = _nccl_setting("NCCL_NET_PLUGIN")
    fallback = _other_plugins(replaced[0], path) if replaced else []
    if fallback:
        env["NCCL_NET_PLUGIN"] = ",".join([path] + fallback)
    if inner is _FROM_NCCL:
        value, said = _inner_from_nccl(path)
        if value is not None:
            env["ZIPCCL_NET_INNER"] = value
        if said is not None:
            warnings.warn(said, RuntimeWarning, stacklevel=2)
    elif inner is None:
        env["ZIPCCL_NET_INNER"] = "none"
    else:
        names = [inner] if isinstance(inner, str) else inner
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
            raise TypeError(f"zipccl.enable: inner= takes a plugin name or path, a list of them, or None; "
                            f"not {inner!r}")
        env["ZIPCCL_NET_INNER"] = ",".join(n.strip() for n in names if n.strip()) or "none"

    if _nccl_net_plugin_loaded() or _torch_process_group_exists():
        warnings.warn("zipccl.enable: NCCL has already loaded a net plugin or a torch.distributed process group "
                      "exists in this process; NCCL reads NCCL_NET_PLUGIN when it creates its first "
                      "communicator, so communicators made before now do not use zipccl. Call enable() before "
                      "init_process_group.", RuntimeWarning, stacklevel=2)
    for conf in _nccl_conf_files():
        values = _read_conf(conf)
        other = values.get("NCCL_NET_PLUGIN")
        others = _other_plugins(other or "", path)
        if others and others != _plugin_list(env.get("ZIPCCL_NET_INNER", "")):  # not what zipccl wraps
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
