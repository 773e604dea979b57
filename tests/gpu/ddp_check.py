#!/usr/bin/env python3
"""An ordinary PyTorch DDP training loop, run through the zipccl NCCL net plugin.

Only the environment differs between the two runs: ZIPCCL_COMPRESS=never, then always. Both must
give bit-identical losses at every step and bit-identical final parameters on every rank (the codec
is lossless and NCCL's reduction order does not depend on the bytes on the wire).

    python3 tests/gpu/ddp_check.py --plugin build/plugin/libnccl-net-zipccl.so [--np 2] [--steps 30]
    python3 tests/gpu/ddp_check.py --enable [PACKAGE_DIR] ...   (each rank calls zipccl.enable(mode)
        before init_process_group instead of the parent setting NCCL_NET_PLUGIN: the Python
        package's way; PACKAGE_DIR holds an unpacked wheel when zipccl is not installed)

The ranks share the GPUs round-robin (all on GPU 0 on a one-GPU machine); each gets its own
NCCL_HOSTID so NCCL treats them as separate nodes and sends through the network plugin, and
NCCL_NET=zipccl so a plugin that fails to load is an error, not a silent fallback.
Exit status: 0 identical, 1 different or failed, 3 no GPU or no PyTorch here.
"""
import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile


def worker(args):
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    if args.enable is not None:
        if args.enable:
            sys.path.insert(0, args.enable)
        import zipccl

        zipccl.enable(args.mode, stats_file=os.path.join(args.out, "stats.jsonl"))
    dev = torch.device("cuda", args.rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=args.rank, world_size=args.np,
                            init_method=f"tcp://127.0.0.1:{args.port}")
    torch.manual_seed(0)  # the same initial model on every rank (DDP also broadcasts rank 0's)
    model = nn.Sequential(
        nn.Linear(1024, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU(), nn.Linear(2048, 1024),
    ).to(dev, torch.bfloat16)  # bf16 parameters: bf16 gradient buckets on the wire
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator(device="cpu").manual_seed(1000 + args.rank)
    losses = []
    for _ in range(args.steps):
        x = torch.randn(64, 1024, generator=gen).to(dev, torch.bfloat16)
        y = torch.randn(64, 1024, generator=gen).to(dev, torch.bfloat16)
        loss = ((ddp(x) - y).float() ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.item()).hex())
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().view(torch.int16).cpu().numpy().tobytes())
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(args.out, f"rank{args.rank}.json"), "w") as f:
        json.dump({"losses": losses, "params": digest.hexdigest()}, f)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args, mode):
    out = tempfile.mkdtemp(prefix="zipccl-ddp-")
    port = free_port()
    procs = []
    for r in range(args.np):
        env = dict(os.environ)
        env.update({"NCCL_NET": "zipccl", "NCCL_HOSTID": f"zipccl-ddp-{r}"})
        if args.enable is None:
            env.update({"NCCL_NET_PLUGIN": args.plugin, "ZIPCCL_COMPRESS": mode,
                        "ZIPCCL_STATS_FILE": os.path.join(out, "stats.jsonl")})
        else:
            for k in ("NCCL_NET_PLUGIN", "ZIPCCL_COMPRESS", "ZIPCCL_STATS_FILE"):
                env.pop(k, None)
        env.setdefault("NCCL_DEBUG", "WARN")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--rank", str(r), "--np", str(args.np),
               "--port", str(port), "--steps", str(args.steps), "--out", out, "--mode", mode]
        if args.enable is not None:
            cmd += ["--enable", args.enable]
        procs.append(subprocess.Popen(cmd, env=env))
    ok = True
    for p in procs:
        try:
            ok &= p.wait(timeout=args.timeout) == 0
        except subprocess.TimeoutExpired:
            print(f"ddp_check: {mode}: a rank still runs after {args.timeout} s (hang?); killed")
            for q in procs:
                q.kill()
            return None, None
    if not ok:
        print(f"ddp_check: {mode}: a rank failed")
        return None, None
    ranks = []
    for r in range(args.np):
        with open(os.path.join(out, f"rank{r}.json")) as f:
            ranks.append(json.load(f))
    stats = {"bytes_in": 0, "bytes_wire": 0, "compressed": 0, "messages": 0}
    path = os.path.join(out, "stats.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                s = json.loads(line)
                if s.get("dir") == "send":
                    for k in stats:
                        stats[k] += s.get(k, 0)
    return ranks, stats


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plugin", default="zipccl")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--timeout", type=int, default=150)
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--out", default="")
    ap.add_argument("--mode", default="never")
    ap.add_argument("--enable", nargs="?", const="", default=None,
                    help="each rank calls zipccl.enable(mode) (the package from PACKAGE_DIR, if given)")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    try:
        import torch
    except ImportError:
        print("ddp_check: PyTorch is not installed here; nothing was checked")
        return 3
    if not torch.cuda.is_available():
        print("ddp_check: no CUDA device; nothing was checked")
        return 3
    how = "zipccl.enable()" if args.enable is not None else f"plugin {args.plugin}"
    print(f"ddp_check: {args.np} ranks, {args.steps} steps, {how}, torch {torch.__version__}, "
          f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
    base, base_stats = run(args, "never")
    comp, comp_stats = run(args, "always")
    if base is None or comp is None:
        return 1
    same_loss = all(b["losses"] == c["losses"] for b, c in zip(base, comp))
    same_params = all(b["params"] == c["params"] for b, c in zip(base, comp))
    ratio = comp_stats["bytes_in"] / comp_stats["bytes_wire"] if comp_stats["bytes_wire"] else 0
    print(f"ddp_check: losses rank 0, never:  {[float.fromhex(x) for x in base[0]['losses'][:5]]} ...")
    print(f"ddp_check: losses rank 0, always: {[float.fromhex(x) for x in comp[0]['losses'][:5]]} ...")
    print(f"ddp_check: plugin (compressed run, send side): {comp_stats['messages']} messages, "
          f"{comp_stats['compressed']} compressed, {comp_stats['bytes_in']} -> {comp_stats['bytes_wire']} bytes, "
          f"ratio {ratio:.3f}")
    print(f"ddp_check: losses bit-identical: {same_loss}; final parameters bit-identical: {same_params}")
    return 0 if same_loss and same_params else 1


if __name__ == "__main__":
    sys.exit(main())
