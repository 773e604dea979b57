"""A gloo job of WORLD processes (tests/python/test_hetero.py). Each rank lays out an encoder and an
LLM with zipccl.hetero, crosses the boundary with BoundaryExchange, runs one forward and backward, then
the same model undistributed in its own process. Values are small integers in float32, so every sum is
exact whatever its order and the distributed results must equal the reference bit for bit.

    python hetero_worker.py WORLD CASE STORE OUTDIR

This process imports torch once and forks the WORLD ranks (torch.multiprocessing's fork start method
does the same): under qemu-aarch64 an import of torch costs ~20 s of CPU, which a process per rank
paid WORLD times. Each rank is its own process with its own process group; nothing that starts a
thread runs before the fork. Rank r writes one JSON line to OUTDIR/rank<r>.out (its stderr to
rank<r>.err); the exit status is 0 when every rank exited 0."""
import json
import os
import signal
import sys
import time
import traceback

import torch
import torch.distributed as dist

from zipccl import hetero

CASES = {
    # fan-in, colocated: every rank runs the encoder (tp 1, dp 4) and the LLM (tp 2, dp 2)
    "colocated4": dict(world=4, llm={"tp": 2}, encoders=[{"tp": 1}], strategy="direct", llm_assignment="contiguous"),
    # separate placement: the encoder on ranks 0-3 (tp 1, dp 4), the LLM on ranks 4-7 (tp 2, dp 2)
    "separate8": dict(world=8, llm={"tp": 2, "first_rank": 4, "num_ranks": 4},
                      encoders=[{"tp": 1, "first_rank": 0, "num_ranks": 4}], strategy="scatter_allgather",
                      llm_assignment="balanced"),
}
TOKENS = [3, 5, 0, 7, 2, 4, 6, 1, 9, 2]  # uneven, one empty sample
IN, HIDDEN, OUT = 4, 6, 4


class CopyToTP(torch.autograd.Function):
    """Megatron's copy into the tp region: identity forward, all-reduce of the gradient backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


def run_rank(rank, world, case, store):
    """One rank's job; returns its result."""
    t0 = time.perf_counter()
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    c = CASES[case]
    assert c["world"] == world
    layout = hetero.Layout(world, c["llm"], c["encoders"])
    groups = hetero.new_groups(layout)
    t_setup = time.perf_counter() - t0
    g = torch.Generator().manual_seed(1234)  # the same data on every rank
    X = [torch.randint(-3, 4, (t, IN), generator=g).float() for t in TOKENS]
    W_ENC = torch.randint(-2, 3, (HIDDEN, IN), generator=g).float()
    B_ENC = torch.randint(-2, 3, (HIDDEN,), generator=g).float()
    W_LLM = torch.randint(-2, 3, (OUT, HIDDEN), generator=g).float()

    def rows(module, r):
        segs = layout.segments(module, r, TOKENS, llm_assignment=c["llm_assignment"])
        return segs, (torch.cat([X[s][b:e] for s, b, e, _ in segs]) if segs else torch.empty(0, IN))

    enc = layout.encoders[0]
    llm = layout.llm
    encoder = torch.nn.Linear(IN, HIDDEN)
    with torch.no_grad():
        encoder.weight.copy_(W_ENC)
        encoder.bias.copy_(B_ENC)

    t1 = time.perf_counter()
    exchange = hetero.BoundaryExchange(layout, TOKENS, HIDDEN, dtype=torch.float32, strategy=c["strategy"],
                                       llm_assignment=c["llm_assignment"])
    _, x_enc = rows(1, rank)
    y = encoder(x_enc) if enc.contains(rank) else torch.empty(0, HIDDEN)
    llm_in = exchange(y)

    result = {"rank": rank}
    loss = llm_in.sum() * 0  # ranks outside the LLM: a loss that still reaches the boundary's backward
    if llm.contains(rank):
        segs, x_llm = rows(0, rank)
        reference_in = encoder(x_llm).detach()  # the same rows, undistributed
        result["llm_rows"] = int(llm_in.shape[0])
        result["input_equal"] = bool(torch.equal(llm_in.detach(), reference_in))
        tp_rank = (rank - llm.first_rank) % llm.tp  # tp is the fastest dimension of the default order
        shard = W_LLM.chunk(llm.tp)[tp_rank]
        out = CopyToTP.apply(llm_in, groups[(llm.name, "tp")]) @ shard.t()
        loss = (out * out).sum()
    loss.backward()
    if enc.contains(rank):
        for p in (encoder.weight, encoder.bias):
            dist.all_reduce(p.grad, group=groups[(enc.name, "dp")])
    total = loss.detach().clone()
    dist.all_reduce(total)
    t_step = time.perf_counter() - t1

    # The undistributed model: every sample through the encoder and the whole LLM.
    ref = torch.nn.Linear(IN, HIDDEN)
    with torch.no_grad():
        ref.weight.copy_(W_ENC)
        ref.bias.copy_(B_ENC)
    ref_out = ref(torch.cat(X)) @ W_LLM.t()
    ref_loss = (ref_out * ref_out).sum()
    ref_loss.backward()
    result["loss"] = float(total)
    result["loss_equal"] = bool(torch.equal(total, ref_loss.detach()))
    if enc.contains(rank):
        result["grad_equal"] = bool(torch.equal(encoder.weight.grad, ref.weight.grad)
                                    and torch.equal(encoder.bias.grad, ref.bias.grad))
        result["grad_abs_sum"] = float(encoder.weight.grad.abs().sum())
    result["plan_strategy"] = exchange.forward_plan["strategy"]
    result["setup_s"] = round(t_setup, 3)
    result["step_s"] = round(t_step, 3)
    dist.barrier()
    dist.destroy_process_group()
    return result


def main(world, case, store, outdir):
    ranks = {}
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                with open(os.path.join(outdir, f"rank{rank}.out"), "w") as out, \
                        open(os.path.join(outdir, f"rank{rank}.err"), "w") as err:
                    os.dup2(out.fileno(), 1)
                    os.dup2(err.fileno(), 2)
                    try:
                        print(json.dumps(run_rank(rank, world, case, store)))
                        code = 0
                    except BaseException:
                        traceback.print_exc()
                    finally:
                        sys.stdout.flush()
                        sys.stderr.flush()
            finally:
                os._exit(code)  # no atexit handler or finaliser of the parent's runs in a rank
        ranks[pid] = rank
    failed = []
    while ranks:
        pid, status = os.wait()
        rank = ranks.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            if not failed:
                # The others would wait for this rank in their next collective until the test's timeout.
                for other in ranks:
                    os.kill(other, signal.SIGKILL)
            failed.append(f"rank {rank} exited {code}")
    if failed:
        print(f"hetero_worker: {'; '.join(failed)} (stderr in {outdir}/rank<r>.err)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]))
