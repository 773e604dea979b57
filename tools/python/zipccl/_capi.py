"""libzipccl.so, zipccl's C API (tools/capi/include/zipccl/zipccl_c.h), through ctypes.

The library imports no CPython symbol, so this one binding serves every CPython. It is opened with
ctypes.CDLL, whose calls release the GIL for their whole length (PyDLL's would hold it): other Python
threads run while the codec does. Functions here take buffer addresses; the caller (zipccl._codec)
keeps the objects that own those buffers alive, and exported, until the call returns. A non-zero
status becomes an exception of zipccl._errors (or ValueError, RuntimeError) with the library's message.
"""
import ctypes
import operator
from ctypes import POINTER, byref, c_char, c_char_p, c_double, c_int, c_int32, c_int64, c_size_t, c_uint32, c_uint64
from ctypes import c_void_p
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ._errors import BatchError, FormatError, LayoutError, LimitError
from ._paths import capi_path

# ZIPCCL_C_ABI_VERSION of the header these declarations follow: a library of another refuses to load.
ABI_VERSION = 1

TYPE_CODES = {"none": 0, "bf16": 1, "fp16": 2, "fp32": 3, "auto": 255}
TYPE_NAMES = {v: k for k, v in TYPE_CODES.items()}
KIND_NAMES = {0: "raw", 1: "const", 2: "coded"}
ISA_CODES = {"auto": 0, "scalar": 1, "avx2": 2, "avx512": 3, "neon": 4}
_DIM_NAMES = ("tp", "cp", "dp", "pp")  # ZIPCCL_DIM_*
_GROUP_KINDS = ("tp", "cp", "dp", "pp", "model_parallel", "boundary")  # ZIPCCL_GROUP_*
_ASSIGN = {"contiguous": 0, "balanced": 1, "given": 2}  # ZIPCCL_ASSIGN_*
_STRATEGIES = ("direct", "scatter_allgather", "automatic")  # ZIPCCL_STRATEGY_*

# Status codes (ZIPCCL_ERR_*) -> exception classes; the rest are ValueError (a bad argument, a buffer
# too small, an input too large for a frame).
_ERRORS = {-4: FormatError, -5: FormatError, -6: FormatError, -7: FormatError, -8: RuntimeError,
           -9: LayoutError, -10: BatchError, -11: LimitError}


# ---- the header's structs (sizes as the header states them; tests/python/test_capi.py checks) ----

class FrameInfo(ctypes.Structure):
    _fields_ = [("kind", c_int32), ("elem_type", c_int32), ("original_size", c_uint64), ("frame_size", c_uint64),
                ("num_blocks", c_uint32), ("block_elems", c_uint32)]


class InspectReport(ctypes.Structure):
    _fields_ = [("elem_type", c_int32), ("type_detected", c_int32), ("frame_kind", c_int32),
                ("exponent_bits", c_int32), ("exponent_bias", c_int32), ("has_exponent_range", c_int32),
                ("exponent_min", c_int32), ("exponent_max", c_int32), ("distinct_exponents", c_int32),
                ("reserved", c_int32), ("bytes", c_uint64), ("compressed_bytes", c_uint64),
                ("predicted_bytes", c_uint64), ("ratio", c_double), ("bound_ratio", c_double),
                ("entropy_bits", c_double), ("zero_or_subnormal", c_uint64), ("inf_or_nan", c_uint64),
                ("exponent_counts", c_uint64 * 256), ("exponent_summary", c_char * 256)]


class ModuleSpec(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("order", c_char_p), ("tp", c_int32), ("cp", c_int32), ("pp", c_int32),
                ("dp", c_int32), ("sequence_parallel", c_int32), ("first_rank", c_int32), ("num_ranks", c_int32),
                ("reserved", c_int32)]


class ModuleInfo(ctypes.Structure):
    _fields_ = [("role", c_int32), ("tp", c_int32), ("cp", c_int32), ("dp", c_int32), ("pp", c_int32),
                ("first_rank", c_int32), ("num_ranks", c_int32), ("sequence_parallel", c_int32),
                ("order", c_int32 * 4), ("strides", c_int32 * 4)]


class GroupFamily(ctypes.Structure):
    _fields_ = [("kind", c_int32), ("module", c_int32), ("num_groups", c_uint32), ("group_size", c_uint32)]


class CBatch(ctypes.Structure):
    _fields_ = [("tokens", POINTER(c_int64)), ("num_samples", c_size_t), ("hidden", c_int64),
                ("element_size", c_int64), ("encoder_rule", c_int32), ("llm_rule", c_int32),
                ("encoder_replica", POINTER(c_int32)), ("llm_replica", POINTER(c_int32))]


class Segment(ctypes.Structure):
    _fields_ = [("sample", c_int32), ("reserved", c_int32), ("row_begin", c_int64), ("row_end", c_int64),
                ("offset", c_int64)]


class Transfer(ctypes.Structure):
    _fields_ = [("src", c_int32), ("dst", c_int32), ("sample", c_int32), ("src_buffer", c_int32),
                ("row_begin", c_int64), ("row_end", c_int64), ("src_offset", c_int64), ("dst_offset", c_int64),
                ("bytes", c_int64)]


class PlanInfo(ctypes.Structure):
    _fields_ = [("strategy", c_int32), ("source_module", c_int32), ("destination_module", c_int32),
                ("reserved", c_int32), ("row_bytes", c_int64), ("num_phases", c_uint64),
                ("num_transfers", c_uint64)]


# ---- loading ----

_P = POINTER
# name -> argument types of every status-returning function this binding calls (zipccl_c.h's order).
SIGNATURES = {
    "zipccl_version": (_P(c_char_p),),
    "zipccl_simd_path": (_P(c_char_p),),
    "zipccl_max_compressed_size": (c_size_t, _P(c_size_t)),
    "zipccl_compress": (c_void_p, c_size_t, c_void_p, c_size_t, _P(c_size_t), c_int, c_int, c_int, c_int),
    "zipccl_frames": (c_void_p, c_size_t, _P(FrameInfo), c_size_t, _P(c_size_t), _P(c_size_t)),
    "zipccl_decompress": (c_void_p, c_size_t, c_void_p, c_size_t, _P(c_size_t), c_int, c_int),
    "zipccl_inspect": (c_void_p, c_size_t, c_int, c_int, _P(InspectReport)),
    "zipccl_setting_count": (_P(c_size_t),),
    "zipccl_setting": (c_size_t, _P(c_char_p), _P(c_char_p), _P(c_char_p), _P(c_char_p)),
    "zipccl_module_spec_default": (_P(ModuleSpec),),
    "zipccl_layout_validate": (c_int, _P(ModuleSpec), c_size_t, _P(ModuleInfo)),
    "zipccl_layout_groups": (c_int, _P(ModuleSpec), c_size_t, _P(GroupFamily), c_size_t, _P(c_size_t), _P(c_int32),
                             c_size_t, _P(c_size_t)),
    "zipccl_boundary_segments": (c_int, _P(ModuleSpec), c_size_t, c_int, _P(CBatch), c_int, _P(Segment), c_size_t,
                                 _P(c_size_t)),
    "zipccl_boundary_plan": (c_int, _P(ModuleSpec), c_size_t, c_int, _P(CBatch), c_int, c_int, _P(PlanInfo),
                             _P(c_uint64), c_size_t, _P(Transfer), c_size_t, _P(c_int64), _P(c_int64)),
}


def _raise_on_error(status, func, args):
    # ctypes' errcheck: runs on the calling thread right after the call, where the library keeps the
    # message. The message starts with the C function's name, which a Python caller did not call.
    if status == 0:
        return status
    message = _lib.zipccl_last_error().decode("utf-8", "replace")
    prefix = func.__name__[len("zipccl_"):] + ": "
    if message.startswith(prefix):
        message = message[len(prefix):]
    raise _ERRORS.get(status, ValueError)(message or f"{func.__name__} returned {status}")


def _load() -> ctypes.CDLL:
    path = capi_path()
    try:
        lib = ctypes.CDLL(path)  # CDLL: the GIL is released during every call
    except OSError as e:
        raise ImportError(f"zipccl: cannot load the C API library {path}: {e}") from None
    lib.zipccl_abi_version.restype = c_int
    lib.zipccl_abi_version.argtypes = ()
    found = lib.zipccl_abi_version()
    if found != ABI_VERSION:
        raise ImportError(f"zipccl: {path} has C ABI version {found}; this package was written for "
                          f"{ABI_VERSION}: reinstall zipccl")
    lib.zipccl_last_error.restype = c_char_p
    lib.zipccl_last_error.argtypes = ()
    for name, argtypes in SIGNATURES.items():
        f = getattr(lib, name)
        f.restype = c_int
        f.argtypes = argtypes
        f.errcheck = _raise_on_error
    return lib


_lib = _load()


# ---- library ----

def version() -> str:
    s = c_char_p()
    _lib.zipccl_version(byref(s))
    return s.value.decode()


def simd_path() -> str:
    s = c_char_p()
    _lib.zipccl_simd_path(byref(s))
    return s.value.decode()


def setting_names() -> List[str]:
    count = c_size_t()
    _lib.zipccl_setting_count(byref(count))
    names = []
    for i in range(count.value):
        name = c_char_p()
        _lib.zipccl_setting(i, byref(name), None, None, None)
        names.append(name.value.decode())
    return names


# ---- codec: addresses and sizes in, sizes out ----

def max_compressed_size(n: int) -> int:
    bound = c_size_t()
    _lib.zipccl_max_compressed_size(n, byref(bound))
    return bound.value


def compress(src: int, n: int, dst: int, capacity: int, elem_type: int, block_log2: int, threads: int,
             isa: int) -> int:
    written = c_size_t()
    _lib.zipccl_compress(src, n, dst, capacity, byref(written), elem_type, block_log2, threads, isa)
    return written.value


def decompress(src: int, n: int, dst: int, capacity: int, threads: int, isa: int) -> int:
    written = c_size_t()
    _lib.zipccl_decompress(src, n, dst, capacity, byref(written), threads, isa)
    return written.value


def decoded_size(src: int, n: int) -> int:
    """The bytes the stream src[0, n) decodes to (its headers validated, not its blocks)."""
    count, total = c_size_t(), c_size_t()
    _lib.zipccl_frames(src, n, None, 0, byref(count), byref(total))
    return total.value


def frames(src: int, n: int) -> List[Tuple[int, int, int, int, int, int]]:
    """(kind, elem_type, original_size, frame_size, num_blocks, block_elems) of every frame."""
    count, total = c_size_t(), c_size_t()
    _lib.zipccl_frames(src, n, None, 0, byref(count), byref(total))
    infos = (FrameInfo * count.value)()
    _lib.zipccl_frames(src, n, infos, count.value, byref(count), byref(total))
    return [(f.kind, f.elem_type, f.original_size, f.frame_size, f.num_blocks, f.block_elems)
            for f in infos[:count.value]]


def inspect(src: int, n: int, elem_type: int, threads: int) -> Dict[str, Any]:
    r = InspectReport()
    _lib.zipccl_inspect(src, n, elem_type, threads, byref(r))
    return {
        "dtype": TYPE_NAMES[r.elem_type],
        "type_detected": bool(r.type_detected),
        "bytes": r.bytes,
        "compressed_bytes": r.compressed_bytes,
        "ratio": r.ratio,
        "entropy_bits": r.entropy_bits,
        "predicted_bytes": r.predicted_bytes,
        "bound_ratio": r.bound_ratio,
        "frame_kind": KIND_NAMES[r.frame_kind],
        "exponent_range": (r.exponent_min, r.exponent_max) if r.has_exponent_range else None,
        # one count per value of the exponent field: 256 (bf16, fp32), 32 (fp16), none (no float type)
        "exponent_counts": list(r.exponent_counts[:(1 << r.exponent_bits) if r.exponent_bits else 0]),
        "distinct_exponents": r.distinct_exponents,
        "zero_or_subnormal": r.zero_or_subnormal,
        "inf_or_nan": r.inf_or_nan,
        "exponent_summary": r.exponent_summary.decode("utf-8", "replace"),
    }


# ---- hetero: Python dicts and lists in and out, C structs in between ----

_MODULE_FIELDS = ("name", "tp", "cp", "pp", "dp", "sequence_parallel", "first_rank", "num_ranks", "order")
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _integer(v: Any, what: str, bounds: Tuple[int, int] = _INT32) -> int:
    # ctypes would wrap an integer that does not fit the C type; say so instead.
    i = operator.index(v)  # TypeError for floats, strings, ...
    if not bounds[0] <= i <= bounds[1]:
        raise ValueError(f"{what} = {i} does not fit the C API's {64 if bounds is _INT64 else 32}-bit integer")
    return i


def _text(v: Any, what: str) -> bytes:
    if not isinstance(v, str):
        raise TypeError(f"{what} must be a str, not {type(v).__name__}")
    return v.encode()


def _module_specs(llm: Dict[str, Any], encoders: Sequence[Dict[str, Any]]):
    """(ModuleSpec array: the LLM, then the encoders; their names as the C++ library gives them)."""
    specs = (ModuleSpec * (1 + len(encoders)))()
    names = []
    for i, (d, what) in enumerate([(llm, "llm")] + [(e, f"encoder {k}") for k, e in enumerate(encoders)]):
        s = specs[i]
        _lib.zipccl_module_spec_default(byref(s))
        name = ""
        for key, v in dict(d).items():
            if key == "name":
                name = v
                s.name = _text(v, f"{what}: name")
            elif key == "order":
                s.order = _text(v, f"{what}: order")
            elif key == "sequence_parallel":
                if not isinstance(v, (bool, int)):
                    raise TypeError(f"{what}: sequence_parallel must be a bool, not {type(v).__name__}")
                s.sequence_parallel = 1 if v else 0
            elif key in _MODULE_FIELDS:
                setattr(s, key, _integer(v, f"{what}: {key}"))
            else:
                raise ValueError(f"{what}: unknown field '{key}' ({', '.join(_MODULE_FIELDS)})")
        names.append(name or ("llm" if i == 0 else f"encoder{i - 1}"))  # hetero::Layout's defaults
    return specs, names


def validate_layout(world_size: int, llm: Dict[str, Any], encoders: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The modules as the C++ Layout validated and derived them: the LLM, then the encoders."""
    specs, names = _module_specs(llm, encoders)
    infos = (ModuleInfo * len(specs))()
    _lib.zipccl_layout_validate(_integer(world_size, "world_size"), specs, len(specs), infos)
    return [{"name": name, "role": "llm" if m.role == 0 else "encoder", "tp": m.tp, "cp": m.cp, "dp": m.dp,
             "pp": m.pp, "first_rank": m.first_rank, "num_ranks": m.num_ranks,
             "sequence_parallel": bool(m.sequence_parallel), "order": "-".join(_DIM_NAMES[d] for d in m.order),
             "strides": list(m.strides)} for name, m in zip(names, infos)]


def group_families(world_size: int, llm: Dict[str, Any],
                   encoders: Sequence[Dict[str, Any]]) -> List[Tuple[str, int, List[List[int]]]]:
    """(kind, module index, groups) of every family, in the order every process must create them."""
    specs, _ = _module_specs(llm, encoders)
    world = _integer(world_size, "world_size")
    nf, nr = c_size_t(), c_size_t()
    _lib.zipccl_layout_groups(world, specs, len(specs), None, 0, byref(nf), None, 0, byref(nr))
    families, ranks = (GroupFamily * nf.value)(), (c_int32 * nr.value)()
    _lib.zipccl_layout_groups(world, specs, len(specs), families, nf.value, byref(nf), ranks, nr.value, byref(nr))
    out, at = [], 0
    for f in families:
        groups = []
        for _ in range(f.num_groups):
            groups.append(list(ranks[at:at + f.group_size]))
            at += f.group_size
        out.append((_GROUP_KINDS[f.kind], f.module, groups))
    return out


class Batch:
    """A hetero batch as the C API takes it (zipccl_batch); owns the arrays the struct points into.
    encoder_rule / llm_rule: "contiguous", "balanced" or "given" (with a replica per sample)."""

    def __init__(self, tokens: Sequence[int], hidden: int, element_size: int, encoder_rule: str, llm_rule: str,
                 encoder_replica: Sequence[int], llm_replica: Sequence[int]):
        n = len(tokens)
        self._tokens = (c_int64 * n)(*[_integer(t, "tokens", _INT64) for t in tokens])
        self.c = CBatch(tokens=self._tokens, num_samples=n, hidden=_integer(hidden, "hidden", _INT64),
                        element_size=_integer(element_size, "element_size", _INT64))
        self.c.encoder_rule, self._encoder_replica = self._rule(encoder_rule, encoder_replica)
        self.c.llm_rule, self._llm_replica = self._rule(llm_rule, llm_replica)
        if self._encoder_replica is not None:
            self.c.encoder_replica = self._encoder_replica
        if self._llm_replica is not None:
            self.c.llm_replica = self._llm_replica

    @staticmethod
    def _rule(rule: str, replica: Sequence[int]):
        if rule not in _ASSIGN:
            raise ValueError(f"assignment must be 'contiguous', 'balanced' or a list of replicas, not '{rule}'")
        if rule != "given":
            return _ASSIGN[rule], None
        return _ASSIGN[rule], (c_int32 * len(replica))(*[_integer(r, "replica") for r in replica])


def _strategy(name: str) -> int:
    if name not in _STRATEGIES:
        raise ValueError(f"strategy must be direct, scatter_allgather or automatic, not '{name}'")
    return _STRATEGIES.index(name)


def plan(world_size: int, llm: Dict[str, Any], encoders: Sequence[Dict[str, Any]], encoder: int, batch: Batch,
         backward: bool, strategy: str) -> Dict[str, Any]:
    """The boundary plan (hetero/plan.h): phases of (src, dst, sample, row_begin, row_end, src_buffer,
    src_offset, dst_offset, bytes), per-rank buffer sizes."""
    specs, _ = _module_specs(llm, encoders)
    world = _integer(world_size, "world_size")
    args = (world, specs, len(specs), _integer(encoder, "encoder"), byref(batch.c), 1 if backward else 0,
            _strategy(strategy))
    info = PlanInfo()
    # First a size query, which validates the layout and the batch before anything is sized by them.
    _lib.zipccl_boundary_plan(*args, byref(info), None, 0, None, 0, None, None)
    ends = (c_uint64 * info.num_phases)()
    transfers = (Transfer * info.num_transfers)()
    src_bytes, dst_bytes = (c_int64 * world)(), (c_int64 * world)()
    _lib.zipccl_boundary_plan(*args, byref(info), ends, len(ends), transfers, len(transfers), src_bytes, dst_bytes)
    phases, at = [], 0
    for end in ends:
        phases.append([(t.src, t.dst, t.sample, t.row_begin, t.row_end, t.src_buffer, t.src_offset, t.dst_offset,
                        t.bytes) for t in transfers[at:end]])
        at = end
    return {"strategy": _STRATEGIES[info.strategy], "source_module": info.source_module,
            "destination_module": info.destination_module, "row_bytes": info.row_bytes, "phases": phases,
            "source_bytes": list(src_bytes), "destination_bytes": list(dst_bytes)}


def segments(world_size: int, llm: Dict[str, Any], encoders: Sequence[Dict[str, Any]], module: int, batch: Batch,
             rank: int) -> List[Tuple[int, int, int, int]]:
    """(sample, row_begin, row_end, byte offset) of `rank`'s part of module `module`'s boundary tensor."""
    specs, _ = _module_specs(llm, encoders)
    args = (_integer(world_size, "world_size"), specs, len(specs), _integer(module, "module"), byref(batch.c),
            _integer(rank, "rank"))
    count = c_size_t()
    _lib.zipccl_boundary_segments(*args, None, 0, byref(count))
    out = (Segment * count.value)()
    _lib.zipccl_boundary_segments(*args, out, len(out), byref(count))
    return [(s.sample, s.row_begin, s.row_end, s.offset) for s in out]


def address(buffer: Optional[Any]) -> Optional[int]:
    """The address of a numpy array's first byte (None for an empty one: the C API takes NULL there)."""
    if buffer is None or buffer.nbytes == 0:
        return None
    return buffer.__array_interface__["data"][0]
