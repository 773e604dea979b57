"""zipccl: lossless compression of NCCL training traffic, from Python.

- :func:`enable` / :func:`plugin_path` / :func:`stats`: the NCCL net plugin this wheel carries.
- :func:`compress` / :func:`compress_into` / :func:`decompress` / :func:`inspect` / :func:`frames`: the codec on numpy
  arrays, CPU torch tensors and bytes (frames identical to the ``zipccl`` tool's).
- :mod:`zipccl.hetero`: heterogeneous encoder/LLM parallelism on torch.distributed (needs torch).
- ``python -m zipccl ...`` runs the ``zipccl`` tool.

The native part is ``libzipccl.so``, a plain C library (the C API, ``zipccl/zipccl_c.h``) that the
package loads with ctypes: it imports no CPython symbol, so one wheel serves every CPython.
``import zipccl``, :func:`enable` and :func:`plugin_path` are pure Python: they load neither numpy nor
that library. The codec loads both at its first use.
"""
from typing import TYPE_CHECKING

from ._errors import FormatError, LayoutError
from ._paths import plugin_path, tool_path
from ._plugin import enable
from ._version import __version__

if TYPE_CHECKING:
    from ._stats import stats
    from ._codec import FrameInfo, compress, compress_into, decompress, frames, inspect, max_compressed_size

# Names served by _codec (numpy and the C API library), loaded at the first use of one of them.
_CODEC_NAMES = ("FrameInfo", "compress", "compress_into", "decompress", "frames", "inspect", "max_compressed_size")


def simd_path() -> str:
    """The CPU kernel set the codec runs here: avx512, avx2, neon or scalar."""
    from . import _capi

    return _capi.simd_path()


def __getattr__(name):
    if name in _CODEC_NAMES:
        from . import _codec

        names = {n: getattr(_codec, n) for n in _CODEC_NAMES}
        globals().update(names)  # later look-ups find them without coming here
        return names[name]
    if name == "stats":  # pure Python (_stats.py), loaded when asked for
        from ._stats import stats

        globals()["stats"] = stats
        return stats
    if name == "hetero":  # imports torch: only when asked for
        import importlib

        return importlib.import_module(".hetero", __name__)
    raise AttributeError(f"module 'zipccl' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__) | {"hetero"})


__all__ = ["FormatError", "FrameInfo", "LayoutError", "compress", "compress_into", "decompress", "enable", "frames",
           "inspect", "max_compressed_size", "plugin_path", "simd_path", "stats", "tool_path"]
