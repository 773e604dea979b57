"""The plugin's statistics, read from the files it writes (pure Python: no numpy, no native module).

Two kinds of file, both JSON:

- live snapshots, one per process (``ZIPCCL_STATS_DIR``, else the folder of ``ZIPCCL_STATS_FILE``:
  ``zipccl-HOST-PID.json``, rewritten every
  ``ZIPCCL_STATS_INTERVAL`` seconds and at finalize; ``"format": "zipccl-stats"``), with the process's
  totals per direction and a bounded history of cumulative bytes;
- per-connection records (``ZIPCCL_STATS_FILE``), one JSON line appended when a connection closes.
"""
import json
import os
import warnings
from typing import Any, Dict, List, Optional

SNAPSHOT_FORMAT = "zipccl-stats"


def _read_snapshot(path: str) -> Optional[Dict[str, Any]]:
    """The snapshot in ``path``, or None (with a warning) when it is not a whole snapshot."""
    try:
        with open(path, encoding="utf-8") as f:
            snap = json.load(f)
    except (OSError, ValueError) as e:
        warnings.warn(f"zipccl.stats: skipped {path}: {e}", RuntimeWarning, stacklevel=3)
        return None
    if not isinstance(snap, dict) or snap.get("format") != SNAPSHOT_FORMAT or not all(
            isinstance(snap.get(d), dict) and "bytes_in" in snap[d] for d in ("send", "recv")):
        warnings.warn(f"zipccl.stats: skipped {path}: not a zipccl snapshot", RuntimeWarning, stacklevel=3)
        return None
    snap["file"] = path
    return snap


def _snapshots(folder: str) -> List[Dict[str, Any]]:
    names = sorted(n for n in os.listdir(folder) if n.startswith("zipccl-") and n.endswith(".json"))
    snaps = [s for s in (_read_snapshot(os.path.join(folder, n)) for n in names) if s is not None]
    return sorted(snaps, key=lambda s: (s.get("rank", -1) < 0, s.get("rank", -1), s.get("host", ""), s.get("pid", 0)))


def stats(path: Optional[str] = None) -> List[Dict[str, Any]]:
    """The plugin's statistics as a list of dicts.

    ``path`` a folder (or, without ``path``, ``ZIPCCL_STATS_DIR``): the live snapshots in it, one dict per
    process (``rank``, ``host``, ``pid``, ``send``/``recv`` totals, ``history``), ordered by rank; a file
    that is not a whole snapshot is skipped with a RuntimeWarning. ``path`` a snapshot file: [it].
    Otherwise ``path`` (or ``ZIPCCL_STATS_FILE``) is the per-connection record file: one dict per JSON
    line. [] when there are none yet.
    """
    if path is None:
        path = os.environ.get("ZIPCCL_STATS_DIR") or os.environ.get("ZIPCCL_STATS_FILE")
    if not path:
        raise ValueError("zipccl.stats: no statistics: pass enable(stats_file=...), set ZIPCCL_STATS_DIR, or path=")
    if os.path.isdir(path):
        return _snapshots(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    if text.lstrip().startswith('{"format":"' + SNAPSHOT_FORMAT):
        snap = _read_snapshot(path)
        return [snap] if snap else []
    return [json.loads(line) for line in text.splitlines() if line.strip()]
