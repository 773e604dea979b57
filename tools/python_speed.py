#!/usr/bin/env python3
"""The codec through Python against `zipccl bench`, side by side (BENCHMARKS.md, issue 34).

Run with the Python of an environment where the zipccl wheel is installed:

    python tools/python_speed.py [--mib 64] [--rounds 5] [--reps 5] [FILE.bf16 ...]

The input is real bf16 (raw little-endian files, by default ../shared/data/*.bf16 beside the
checkout), concatenated and repeated to --mib MiB. Each round measures, on one thread, best of --reps:
`zipccl bench` (the wheel's own tool, in its process: encode and decode of the same bytes) and, in
this process, `compress_into(x, buf)` and `decompress(frame, out=y)` into buffers reused between
calls, plus `compress()` and `decompress()` for reference; the two sides alternate which goes
first. Prints each round, the medians and Python / bench, and the load average before and after.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import zipccl


def best(fn, reps):
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def python_side(x, reps):
    frame = zipccl.compress(x, dtype="bf16")
    buf = np.empty(zipccl.max_compressed_size(x.nbytes), np.uint8)
    out = np.empty_like(x)
    n = zipccl.compress_into(x, buf, dtype="bf16")
    assert bytes(buf[:n]) == frame
    zipccl.decompress(frame, out=out)  # the buffers' first touch is not timed (bench's are written before)
    gb = x.nbytes / 1e9
    r = {
        "compress_into": gb / best(lambda: zipccl.compress_into(x, buf, dtype="bf16"), reps),
        "decompress_out": gb / best(lambda: zipccl.decompress(frame, out=out), reps),
        "compress": gb / best(lambda: zipccl.compress(x, dtype="bf16"), reps),
        "decompress": gb / best(lambda: zipccl.decompress(frame, dtype=np.uint16), reps),
    }
    assert out.tobytes() == x.tobytes()
    r["ratio"] = x.nbytes / len(frame)
    return r


def bench_side(path, reps):
    p = subprocess.run([zipccl.tool_path(), "bench", "-t", "bf16", "--threads", "1", "--reps", str(reps),
                        "--no-baselines", "--json", path], capture_output=True, text=True, check=True)
    z = json.loads(p.stdout)["inputs"][0]["zipccl"]
    return {"encode": z["encode_gbps_1t"], "decode": z["decode_gbps_1t"], "ratio": z["ratio"]}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="raw bf16 files (default ../shared/data/*.bf16)")
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    files = a.files or sorted(glob.glob(os.path.join(here, "..", "..", "shared", "data", "*.bf16")))
    if not files:
        sys.exit("python_speed: no input: give raw bf16 files")
    real = np.concatenate([np.fromfile(f, dtype=np.uint16) for f in files])
    x = np.resize(real, (a.mib << 20) // 2)  # repeated to the size asked
    load0 = os.getloadavg()
    print(f"zipccl {zipccl.__version__} ({zipccl.simd_path()}), python {sys.version.split()[0]}, "
          f"{x.nbytes >> 20} MiB of {', '.join(os.path.basename(f) for f in files)}; one thread, "
          f"best of {a.reps} per round; load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "input.bf16")
        x.tofile(path)
        for rnd in range(a.rounds):
            if rnd % 2 == 0:
                b, p = bench_side(path, a.reps), python_side(x, a.reps)
            else:
                p, b = python_side(x, a.reps), bench_side(path, a.reps)
            rows.append((b, p))
            print(f"round {rnd + 1}: bench enc {b['encode']:.2f} dec {b['decode']:.2f} | python compress_into "
                  f"{p['compress_into']:.2f} decompress(out=) {p['decompress_out']:.2f} | compress() "
                  f"{p['compress']:.2f} decompress() {p['decompress']:.2f} GB/s; ratio {p['ratio']:.3f} "
                  f"(bench {b['ratio']:.3f})", flush=True)
    load1 = os.getloadavg()

    def med(side, key):
        return statistics.median(r[side][key] for r in rows)

    enc = statistics.median(p["compress_into"] / b["encode"] for b, p in rows)
    dec = statistics.median(p["decompress_out"] / b["decode"] for b, p in rows)
    print(f"medians of {a.rounds} rounds (GB/s of bf16 input):")
    print("| direction | `zipccl bench` (C++) | Python (reused buffer) | Python / bench, median of rounds | "
          "Python, fresh result |")
    print("|---|---|---|---|---|")
    print(f"| encode | {med(0, 'encode'):.2f} | `compress_into` {med(1, 'compress_into'):.2f} | {enc:.1%} | "
          f"`compress()` {med(1, 'compress'):.2f} |")
    print(f"| decode | {med(0, 'decode'):.2f} | `decompress(out=)` {med(1, 'decompress_out'):.2f} | {dec:.1%} | "
          f"`decompress()` {med(1, 'decompress'):.2f} |")
    print(f"load average after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")


if __name__ == "__main__":
    main()
