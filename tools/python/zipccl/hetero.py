"""Heterogeneous parallelism on torch.distributed: an encoder and the LLM with their own tp/cp/dp/pp.

:class:`Layout` is the C++ ``zipccl::hetero::Layout`` through the C API library (same validation,
same messages: :class:`LayoutError`); :func:`new_groups` makes every process group the layout needs with
``torch.distributed.new_group``; :class:`BoundaryExchange` moves the encoder's output into the LLM's
input with ``batch_isend_irecv`` following the C++ boundary plan, and its ``__call__`` is an autograd
function whose backward runs the adjoint plan (the LLM input's gradient back to the encoder). The
same code runs on gloo (CPU tensors) and NCCL (CUDA tensors). The boundary tensor is packed
sample-major: each rank's rows of its samples, ascending, ``[rows, hidden]`` (hetero/batch.h).
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

from . import _capi
from ._errors import BatchError, LayoutError, LimitError  # noqa: F401 (zipccl.hetero.LimitError)


class Module:
    """A validated module of a :class:`Layout` (read-only): name, role ("llm" or "encoder"), tp,
    cp, dp, pp, first_rank, num_ranks, sequence_parallel, order (e.g. "tp-cp-dp-pp"), strides."""

    def __init__(self, index: int, fields: Dict[str, Any]):
        self.index = index
        self.__dict__.update(fields)

    def contains(self, rank: int) -> bool:
        return self.first_rank <= rank < self.first_rank + self.num_ranks

    def __repr__(self) -> str:
        return (f"Module({self.name!r}, tp={self.tp}, cp={self.cp}, dp={self.dp}, pp={self.pp}, "
                f"ranks={self.first_rank}..{self.first_rank + self.num_ranks - 1})")


class Layout:
    """How one LLM and its encoders are laid out over the ranks of a job.

    ``Layout(world_size, llm={"tp": 2}, encoders=[{"tp": 1, "first_rank": 0, "num_ranks": 4}])``.
    Module fields: name, tp, cp, pp, dp (0 or omitted: derived), sequence_parallel, first_rank,
    num_ranks (-1 or omitted: the whole world, colocated), order ("tp-cp-dp-pp" by default).
    Raises :class:`LayoutError` with the C++ library's message when a constraint fails.
    """

    def __init__(self, world_size: int, llm: Dict[str, Any], encoders: Sequence[Dict[str, Any]]):
        self.world_size = int(world_size)
        self._llm = dict(llm)
        self._encoders = [dict(e) for e in encoders]
        self.modules = [Module(i, m) for i, m in enumerate(_capi.validate_layout(self.world_size, self._llm,
                                                                                     self._encoders))]

    @property
    def llm(self) -> Module:
        return self.modules[0]

    @property
    def encoders(self) -> List[Module]:
        return self.modules[1:]

    def group_families(self) -> List[Tuple[str, int, List[List[int]]]]:
        """(kind, module index, rank lists) of every group family: per module tp, cp, dp, pp,
        model_parallel, then one boundary family per encoder (hetero/groups.h)."""
        return _capi.group_families(self.world_size, self._llm, self._encoders)

    def _batch(self, tokens, hidden, element_size, encoder_assignment, llm_assignment):
        def rule(a):
            return ("given", [int(r) for r in a]) if not isinstance(a, str) else (a, [])

        er, erep = rule(encoder_assignment)
        lr, lrep = rule(llm_assignment)
        return _capi.Batch([int(t) for t in tokens], int(hidden), int(element_size), er, lr, erep, lrep)

    def segments(self, module: int, rank: int, tokens: Sequence[int], *, encoder_assignment="contiguous",
                 llm_assignment="contiguous") -> List[Tuple[int, int, int, int]]:
        """(sample, row_begin, row_end, row_offset) of the rows ``rank`` keeps of module
        ``module``'s boundary tensor (0: the LLM's input, 1 + e: encoder e's output), in the order of
        its packed local buffer; row_offset counts rows from the buffer's start."""
        b = self._batch(tokens, 1, 1, encoder_assignment, llm_assignment)
        return _capi.segments(self.world_size, self._llm, self._encoders, module, b, rank)

    def plan(self, encoder: int, tokens: Sequence[int], hidden: int, element_size: int, *, backward: bool = False,
             strategy: str = "direct", encoder_assignment="contiguous", llm_assignment="contiguous") -> Dict[str, Any]:
        """The C++ boundary plan (hetero/plan.h) as a dict: strategy, row_bytes, phases (lists of
        (src, dst, sample, row_begin, row_end, src_buffer, src_offset, dst_offset, bytes); src_buffer
        0 is the sender's source buffer, 1 its destination buffer), source_bytes and
        destination_bytes per rank."""
        b = self._batch(tokens, hidden, element_size, encoder_assignment, llm_assignment)
        return _capi.plan(self.world_size, self._llm, self._encoders, encoder, b, backward, strategy)


def new_groups(layout: Layout, backend: Optional[str] = None) -> Dict[Tuple[str, str], Any]:
    """Creates every group of the layout with ``torch.distributed.new_group`` (all ranks must call
    this, in the same order) and returns this rank's: ``{(module name, kind): ProcessGroup}`` with
    kind tp, cp, dp, pp, model_parallel or boundary (keyed by the encoder's name)."""
    if layout.world_size != dist.get_world_size():
        raise ValueError(f"zipccl.hetero: the layout is for {layout.world_size} ranks, the job has "
                         f"{dist.get_world_size()}")
    me = dist.get_rank()
    mine: Dict[Tuple[str, str], Any] = {}
    for kind, module, groups in layout.group_families():
        for ranks in groups:
            pg = dist.new_group(ranks, backend=backend)
            if me in ranks:
                mine[(layout.modules[module].name, kind)] = pg
    return mine


class BoundaryExchange:
    """Moves encoder ``encoder``'s output into the LLM's input, and its gradient back.

    ``exchange(x)``: ``x`` is this rank's encoder output, ``[rows, hidden]`` packed sample-major
    (empty where the rank holds none); returns this rank's LLM input ``[rows', hidden]`` (empty
    where it holds none). Differentiable: the backward sends the LLM input's gradient to the ranks
    that produced the rows (one copy per row, as plan.h's backward semantics say: all-reduce
    partial tp gradients first). Every rank of the boundary (or the world) calls it, and the
    backward, in the same order. ``group``: the process group whose ranks the plan's world ranks
    are (None: the default group).
    """

    def __init__(self, layout: Layout, tokens: Sequence[int], hidden: int, *, dtype: torch.dtype = torch.bfloat16,
                 device: Union[str, torch.device] = "cpu", encoder: int = 0, strategy: str = "direct",
                 encoder_assignment="contiguous", llm_assignment="contiguous", group=None):
        self.layout = layout
        self.hidden = int(hidden)
        self.dtype = dtype
        self.device = torch.device(device)
        self.group = group
        self.rank = dist.get_rank(group) if group is not None else dist.get_rank()
        esize = torch.empty((), dtype=dtype).element_size()
        kw = dict(strategy=strategy, encoder_assignment=encoder_assignment, llm_assignment=llm_assignment)
        self.forward_plan = layout.plan(encoder, tokens, hidden, esize, **kw)
        self.backward_plan = layout.plan(encoder, tokens, hidden, esize, backward=True, **kw)

    def _global(self, r: int) -> int:
        return dist.get_global_rank(self.group, r) if self.group is not None else r

    def run(self, plan: Dict[str, Any], src: torch.Tensor) -> torch.Tensor:
        """Runs one plan (forward or backward) on this rank's source rows; returns its destination rows."""
        me = self.rank
        row_bytes = plan["row_bytes"]
        src = src.detach().contiguous()
        if src.numel() * src.element_size() != plan["source_bytes"][me]:
            raise ValueError(f"zipccl.hetero: rank {me} gave {tuple(src.shape)} ({src.numel() * src.element_size()} "
                             f"bytes); the plan needs {plan['source_bytes'][me] // max(row_bytes, 1)} rows of "
                             f"{self.hidden} {self.dtype}")
        rows_out = plan["destination_bytes"][me] // row_bytes if row_bytes else 0
        dst = torch.empty((rows_out, self.hidden), dtype=self.dtype, device=src.device)
        src_b = src.view(-1).view(torch.uint8) if src.numel() else torch.empty(0, dtype=torch.uint8, device=src.device)
        dst_b = dst.view(-1).view(torch.uint8) if dst.numel() else torch.empty(0, dtype=torch.uint8, device=src.device)
        buffers = (src_b, dst_b)
        for phase in plan["phases"]:
            ops = []
            for s, d, _sample, _rb, _re, sbuf, soff, doff, nbytes in phase:
                if s == me and d == me:
                    dst_b[doff:doff + nbytes].copy_(buffers[sbuf][soff:soff + nbytes])
                elif s == me:
                    ops.append(dist.P2POp(dist.isend, buffers[sbuf][soff:soff + nbytes], self._global(d), self.group))
                elif d == me:
                    ops.append(dist.P2POp(dist.irecv, dst_b[doff:doff + nbytes], self._global(s), self.group))
            if ops:
                for req in dist.batch_isend_irecv(ops):
                    req.wait()
        return dst

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and not x.requires_grad:
            # Ranks that only receive (or only relay) must still run the backward plan: the graph
            # needs an input that requires grad for the Function's backward to be called.
            x = x.detach().requires_grad_()
        return _Boundary.apply(x, self)


class _Boundary(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, exchange):
        ctx.exchange = exchange
        ctx.shape = x.shape
        return exchange.run(exchange.forward_plan, x)

    @staticmethod
    def backward(ctx, grad):
        ex = ctx.exchange
        if grad is None:  # a rank whose output took no part in the loss: zeros of its rows
            rows = ex.backward_plan["source_bytes"][ex.rank] // max(ex.backward_plan["row_bytes"], 1)
            grad = torch.zeros((rows, ex.hidden), dtype=ex.dtype, device=ex.device)
        return ex.run(ex.backward_plan, grad).view(ctx.shape), None
