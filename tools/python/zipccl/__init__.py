"""zipccl: lossless compression of NCCL training traffic, from Python.

- :func:`enable` / :func:`plugin_path` / :func:`stats`: the NCCL net plugin this wheel carries.
- :func:`compress` / :func:`compress_into` / :func:`decompress` / :func:`inspect` / :func:`frames`: the codec on numpy
  arrays, CPU torch tensors and bytes (frames identical to the ``zipccl`` tool's).
- :mod:`zipccl.hetero`: heterogeneous encoder/LLM parallelism on torch.distributed (needs torch).
- ``python -m zipccl ...`` runs the ``zipccl`` tool.
"""
from . import _zipccl
from ._codec import (FormatError, FrameInfo, compress, compress_into, decompress, frames, inspect,
                     max_compressed_size)
from ._paths import plugin_path, tool_path
from ._plugin import enable, stats

__version__: str = _zipccl.version().split(" ")[0]
LayoutError = _zipccl.LayoutError


def simd_path() -> str:
    """The CPU kernel set the codec runs here: avx512, avx2, neon or scalar."""
    return _zipccl.simd_path()


def __getattr__(name):
    if name == "hetero":  # imports torch: only when asked for
        import importlib

        return importlib.import_module(".hetero", __name__)
    raise AttributeError(f"module 'zipccl' has no attribute {name!r}")


__all__ = ["FormatError", "FrameInfo", "LayoutError", "compress", "compress_into", "decompress", "enable", "frames",
           "inspect", "max_compressed_size", "plugin_path", "simd_path", "stats", "tool_path"]
