"""Where the wheel put its binaries."""
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def plugin_path() -> str:
    """Absolute path of the NCCL net plugin inside this package (``libnccl-net-zipccl.so``)."""
    return os.path.join(_HERE, "lib", "libnccl-net-zipccl.so")


def tool_path() -> str:
    """Absolute path of the ``zipccl`` command-line tool inside this package."""
    return os.path.join(_HERE, "bin", "zipccl")


def capi_path() -> str:
    """Absolute path of ``libzipccl.so``, the C API library the codec and hetero run on
    (header ``zipccl/zipccl_c.h``)."""
    return os.path.join(_HERE, "lib", "libzipccl.so")
