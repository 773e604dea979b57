"""The codec on numpy arrays, torch CPU tensors and bytes-like objects.

Inputs are viewed as bytes without copying when they are contiguous, and their addresses handed to
the C API library (zipccl._capi, ctypes), which codes while the GIL is released; the views here keep
the buffers exported until the call returns. Frames are those of ``zipccl compress``: a stream of
frames, each coding at most 8 MiB of input (gpu_codec/FORMAT.md section 8).
"""
import operator
import sys
from typing import Any, Dict, List, NamedTuple, Optional

import numpy as np

from . import _capi

_TYPE_CODES = _capi.TYPE_CODES
_TYPE_NAMES = _capi.TYPE_NAMES
_KIND_NAMES = _capi.KIND_NAMES
_address = _capi.address


class FrameInfo(NamedTuple):
    """One frame's header: ``kind`` (raw, const, coded), element ``dtype`` (bf16, fp16, fp32,
    none), decoded bytes, bytes of the frame, blocks and elements per block (coded frames)."""

    kind: str
    dtype: str
    original_size: int
    frame_size: int
    num_blocks: int
    block_elems: int


def _torch():
    return sys.modules.get("torch")


def _numpy_type(dtype: np.dtype) -> str:
    if dtype.name == "bfloat16":
        return "bf16"
    if dtype == np.float16:
        return "fp16"
    if dtype == np.float32:
        return "fp32"
    return "auto"


def _readable(x: Any):
    """(x's bytes as a 1-D uint8 array, its element type name). No copy for contiguous input: the
    array is a view of x's memory and holds x (and its buffer export) while it lives."""
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        if x.device.type != "cpu":
            raise TypeError(
                f"zipccl: a {x.device.type} tensor; the codec here runs on the CPU (x.cpu()), the "
                "plugin codes GPU traffic inside NCCL")
        kind = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}.get(x.dtype, "auto")
        return x.detach().contiguous().reshape(-1).view(torch.uint8).numpy(), kind
    if isinstance(x, np.ndarray):
        if x.dtype.byteorder == ">":
            x = x.astype(x.dtype.newbyteorder("<"))
        return np.ascontiguousarray(x).reshape(-1).view(np.uint8), _numpy_type(x.dtype)
    try:
        mv = memoryview(x)
    except TypeError:
        raise TypeError(f"zipccl: cannot code a {type(x).__name__}: give a numpy array, a CPU torch "
                        "tensor or a bytes-like object") from None
    if not mv.c_contiguous:
        raise ValueError("zipccl: the buffer is not C-contiguous")
    return np.frombuffer(mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv, np.uint8), "auto"


def _writable(out: Any):
    """A writable 1-D uint8 view of out (which must be contiguous: decoding writes into it in place)."""
    torch = _torch()
    if torch is not None and isinstance(out, torch.Tensor):
        if out.device.type != "cpu" or not out.is_contiguous():
            raise ValueError("zipccl: out must be a contiguous CPU tensor")
        return out.reshape(-1).view(torch.uint8).numpy()
    if isinstance(out, np.ndarray):
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("zipccl: out must be a C-contiguous, writeable array")
        return out.reshape(-1).view(np.uint8)
    mv = memoryview(out)
    if mv.readonly or not mv.c_contiguous:
        raise ValueError("zipccl: out must be a writable, contiguous buffer")
    return np.frombuffer(mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv, np.uint8)


def _type_code(dtype: Optional[str], detected: str) -> int:
    name = detected if dtype is None else dtype
    if name not in _TYPE_CODES:
        raise ValueError(f"zipccl: dtype must be one of bf16, fp16, fp32, none, auto; not {name!r}")
    return _TYPE_CODES[name]


def _isa_code(isa: str) -> int:
    if isa not in _capi.ISA_CODES:
        raise ValueError(f"isa must be auto, scalar, avx2, avx512 or neon, not {isa!r}")
    return _capi.ISA_CODES[isa]


def _int(v: Any) -> int:
    # What the C API takes as an int: an integer (TypeError otherwise), not wrapped by ctypes.
    i = operator.index(v)
    if not -(1 << 31) <= i < 1 << 31:
        raise ValueError(f"zipccl: {i} is out of range")
    return i


def compress(x: Any, *, dtype: Optional[str] = None, block_log2: int = 0, threads: int = 1,
             isa: str = "auto") -> bytes:
    """Compresses ``x`` losslessly and returns the frames as bytes.

    ``x``: a numpy array (bfloat16 from ml_dtypes, float16, float32, or any other dtype, coded as
    bytes), a torch CPU tensor, or any bytes-like object. The element type comes from the dtype;
    ``dtype=`` overrides it ("bf16", "fp16", "fp32", "none", or "auto" to detect it from the bytes,
    which is what untyped input gets). The result is byte for byte what ``zipccl compress`` writes
    for the same bytes and type. ``threads`` codes blocks in parallel (same output); ``isa`` picks
    the CPU kernel set (same output). The GIL is released while coding.
    """
    buf, detected = _readable(x)
    code, isa_code = _type_code(dtype, detected), _isa_code(isa)
    cap = _capi.max_compressed_size(buf.nbytes)
    out = np.empty(cap, np.uint8)
    n = _capi.compress(_address(buf), buf.nbytes, _address(out), cap, code, _int(block_log2), _int(threads), isa_code)
    return out[:n].tobytes()


def compress_into(x: Any, out: Any, *, dtype: Optional[str] = None, block_log2: int = 0, threads: int = 1,
                  isa: str = "auto") -> int:
    """:func:`compress` into ``out`` (a writable buffer, numpy array or CPU tensor of at least
    :func:`max_compressed_size` bytes); returns the bytes written. A loop that reuses one buffer
    skips the first-touch page faults of a fresh result on every call (about 2.3x at 64 MiB:
    BENCHMARKS.md section 5)."""
    buf, detected = _readable(x)
    dst = _writable(out)
    code, isa_code = _type_code(dtype, detected), _isa_code(isa)
    cap = _capi.max_compressed_size(buf.nbytes)
    if dst.nbytes < cap:
        raise ValueError(f"out holds {dst.nbytes} bytes; compressing {buf.nbytes} bytes needs "
                         f"max_compressed_size() = {cap}")
    return _capi.compress(_address(buf), buf.nbytes, _address(dst), dst.nbytes, code, _int(block_log2), _int(threads),
                          isa_code)


def max_compressed_size(nbytes: int) -> int:
    """The most bytes :func:`compress` can produce for ``nbytes`` bytes of input."""
    return _capi.max_compressed_size(operator.index(nbytes))


def frames(data: Any) -> List[FrameInfo]:
    """The headers of every frame in ``data`` (validated; blocks are not decoded)."""
    buf, _ = _readable(data)
    return [FrameInfo(_KIND_NAMES[k], _TYPE_NAMES[t], o, f, b, e)
            for k, t, o, f, b, e in _capi.frames(_address(buf), buf.nbytes)]


def _numpy_dtype(name: str) -> np.dtype:
    if name == "bf16":
        try:
            import ml_dtypes
        except ImportError:
            raise ImportError("zipccl: a bf16 stream decodes to an ml_dtypes.bfloat16 array: pip install "
                              "ml_dtypes (or zipccl[bf16]), or pass out= (e.g. a torch.bfloat16 tensor)") from None
        return np.dtype(ml_dtypes.bfloat16)
    if name not in ("fp16", "fp32", "none"):
        raise ValueError(f"zipccl: dtype must be bf16, fp16, fp32 or a numpy dtype; not {name!r}")
    return np.dtype({"fp16": np.float16, "fp32": np.float32}.get(name, np.uint8))


def decompress(data: Any, out: Any = None, *, dtype: Any = None, threads: int = 1, isa: str = "auto") -> Any:
    """Decodes frames made by :func:`compress` (or ``zipccl compress``).

    With ``out=None`` returns a new 1-D numpy array of ``dtype`` (a numpy dtype, or "bf16",
    "fp16", "fp32"); by default of the frames' element type (bf16: ml_dtypes.bfloat16), and uint8
    for untyped frames - small or incompressible inputs are stored as raw frames, which carry no
    element type. Otherwise decodes into ``out`` - a contiguous numpy
    array, CPU torch tensor or writable buffer of exactly the decoded size - and returns it.
    Raises :class:`FormatError` (a ValueError) for malformed or truncated frames; the decoder
    validates every field and never reads or writes outside the buffers. The GIL is released.
    """
    buf, _ = _readable(data)
    if out is None:
        fs = _capi.frames(_address(buf), buf.nbytes)
        total = sum(f[2] for f in fs)
        if dtype is None:
            typed = [f[1] for f in fs if f[1] != _TYPE_CODES["none"]]
            dt = _numpy_dtype(_TYPE_NAMES[typed[0]] if typed else "none")
        else:
            dt = _numpy_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype)
        if total % dt.itemsize:
            if dtype is not None:
                raise ValueError(f"zipccl: the frames decode to {total} bytes, not a whole number of {dt.name}")
            dt = np.dtype(np.uint8)
        out = np.empty(total // dt.itemsize, dtype=dt)
    dst = _writable(out)
    threads, isa_code = _int(threads), _isa_code(isa)
    total = _capi.decoded_size(_address(buf), buf.nbytes)  # the headers only: before anything is written
    if total != dst.nbytes:
        raise ValueError(f"out holds {dst.nbytes} bytes; the frames decode to {total}")
    _capi.decompress(_address(buf), buf.nbytes, _address(dst), dst.nbytes, threads, isa_code)
    return out


def inspect(x: Any, *, dtype: Optional[str] = None, threads: int = 1) -> Dict[str, Any]:
    """The figures ``zipccl inspect`` prints for one tensor, as a dict.

    Keys: dtype, type_detected, bytes, compressed_bytes, ratio, entropy_bits (order-0, per
    element, sum of the codec's byte planes), predicted_bytes and bound_ratio (what that entropy
    predicts), frame_kind, exponent_range (unbiased, of normal numbers; None when there are none),
    exponent_counts (histogram of the raw exponent field), distinct_exponents, zero_or_subnormal,
    inf_or_nan, exponent_summary (the one-line picture of the table). Every frame is decoded again
    and compared while measuring.
    """
    buf, detected = _readable(x)
    return _capi.inspect(_address(buf), buf.nbytes, _type_code(dtype, detected), _int(threads))
