"""zipccl.stats(): the plugin's live snapshots (a folder of zipccl-HOST-PID.json) and its per-connection
records, read in pure Python; a snapshot cut short or foreign is skipped with a warning."""
import json
import sys

import pytest

import spawn
import zipccl


def snapshot(rank, sent, wire, host="n1", pid=100):
    return {"format": "zipccl-stats", "version": 1, "host": host, "pid": pid + rank, "rank": rank, "time": 2.0,
            "started": 1.0, "interval_s": 1, "final": False, "comms_open": 2, "comms_closed": 0,
            "send": {"messages": 4, "bytes_in": sent, "bytes_wire": wire, "ratio": sent / wire, "compressed": 4},
            "recv": {"messages": 4, "bytes_in": sent, "bytes_wire": wire, "ratio": sent / wire, "compressed": 4},
            "history": [[0.0, 0, 0, 0, 0, 0.0], [1.0, sent, wire, sent, wire, 0.5]]}


def test_a_folder_gives_one_snapshot_per_process_by_rank_and_skips_broken_files(tmp_path, monkeypatch):
    for rank in (2, 0, 1):
        (tmp_path / f"zipccl-n1-{100 + rank}.json").write_text(json.dumps(snapshot(rank, 3000, 2000 + rank)))
    full = json.dumps(snapshot(3, 10, 5))
    (tmp_path / "zipccl-n1-103.json").write_text(full[: len(full) // 2])  # cut short
    (tmp_path / "zipccl-n1-104.json").write_text('{"format": "other"}')
    (tmp_path / "zipccl-n1-100.prom").write_text("# not json\n")
    (tmp_path / "unrelated.json").write_text("{}")
    with pytest.warns(RuntimeWarning, match="skipped .*zipccl-n1-10[34].json"):
        snaps = zipccl.stats(str(tmp_path))
    assert [s["rank"] for s in snaps] == [0, 1, 2]
    assert snaps[1]["send"]["bytes_wire"] == 2001
    assert snaps[0]["history"][-1][1] == 3000
    assert snaps[0]["file"].endswith("zipccl-n1-100.json")
    # ZIPCCL_STATS_DIR is where it looks without a path.
    monkeypatch.setenv("ZIPCCL_STATS_DIR", str(tmp_path))
    with pytest.warns(RuntimeWarning):
        assert [s["pid"] for s in zipccl.stats()] == [100, 101, 102]


def test_a_snapshot_file_and_a_record_file(tmp_path, monkeypatch):
    one = tmp_path / "zipccl-n1-7.json"
    one.write_text(json.dumps(snapshot(0, 10, 5), separators=(",", ":")))
    assert zipccl.stats(str(one))[0]["send"]["bytes_in"] == 10
    records = tmp_path / "stats.jsonl"
    records.write_text('{"dir":"send","bytes_in":5}\n{"dir":"recv","bytes_in":5}\n')
    assert [r["dir"] for r in zipccl.stats(str(records))] == ["send", "recv"]
    assert zipccl.stats(str(tmp_path / "absent.jsonl")) == []
    monkeypatch.delenv("ZIPCCL_STATS_DIR", raising=False)
    monkeypatch.delenv("ZIPCCL_STATS_FILE", raising=False)
    with pytest.raises(ValueError):
        zipccl.stats()


def test_stats_needs_neither_numpy_nor_the_native_module():
    import subprocess

    code = ("import sys, zipccl, tempfile\n"
            "zipccl.stats(tempfile.mkdtemp())\n"
            "print(sorted(m for m in ('zipccl._zipccl', 'numpy') if m in sys.modules))\n")
    r = subprocess.run(spawn.python("-c", code), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
