"""The aarch64 C API library (libzipccl.so) from an arm64 CPython, as the py3-none wheel loads it:
ctypes, numpy arrays passed by address, no compiled Python module. Run under qemu-aarch64 with an
arm64 userland as -L prefix (tools/arm64_root.sh; tests/arm64/CMakeLists.txt):
    python3 capi_python.py LIBZIPCCL ZIPCCL_TOOL_FRAMES IN_FILE
Checks: the machine is aarch64 and the codec runs NEON; numpy bf16 data round-trips bit-exactly
through zipccl_compress/zipccl_decompress; the frames are the bytes the aarch64 zipccl tool wrote for
the same input; a truncated stream and a too-small buffer are errors with a message, not a crash."""
import ctypes
import platform
import sys

import numpy as np

lib_path, tool_frames_path, in_path = sys.argv[1:4]
assert platform.machine() == "aarch64", platform.machine()

lib = ctypes.CDLL(lib_path)
size_t_p = ctypes.POINTER(ctypes.c_size_t)
lib.zipccl_last_error.restype = ctypes.c_char_p
lib.zipccl_simd_path.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
lib.zipccl_max_compressed_size.argtypes = [ctypes.c_size_t, size_t_p]
lib.zipccl_compress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, size_t_p,
                                ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
lib.zipccl_decompress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, size_t_p,
                                  ctypes.c_int, ctypes.c_int]

TYPE_BF16 = 1  # ZIPCCL_TYPE_BF16 (zipccl_c.h)
ISA_AUTO = 0


def ok(rc, what):
    assert rc == 0, f"{what}: status {rc}: {lib.zipccl_last_error().decode()}"


simd = ctypes.c_char_p()
ok(lib.zipccl_simd_path(ctypes.byref(simd)), "simd_path")
assert simd.value == b"neon", simd.value

src = np.fromfile(in_path, dtype=np.uint16)
bound = ctypes.c_size_t()
ok(lib.zipccl_max_compressed_size(src.nbytes, ctypes.byref(bound)), "max_compressed_size")
dst = np.empty(bound.value, dtype=np.uint8)
written = ctypes.c_size_t()
ok(lib.zipccl_compress(src.ctypes.data, src.nbytes, dst.ctypes.data, dst.nbytes, ctypes.byref(written),
                       TYPE_BF16, 0, 1, ISA_AUTO), "compress")
frames = dst[:written.value]
assert frames.tobytes() == open(tool_frames_path, "rb").read(), "C API frames differ from the tool's"

out = np.empty_like(src)
got = ctypes.c_size_t()
ok(lib.zipccl_decompress(frames.ctypes.data, frames.nbytes, out.ctypes.data, out.nbytes, ctypes.byref(got), 1,
                         ISA_AUTO), "decompress")
assert got.value == src.nbytes and np.array_equal(out, src), "round trip is not bit-exact"

small = np.empty(src.nbytes - 2, dtype=np.uint8)
rc = lib.zipccl_decompress(frames.ctypes.data, frames.nbytes, small.ctypes.data, small.nbytes, ctypes.byref(got),
                           1, ISA_AUTO)
assert rc == -2, f"a too-small buffer: status {rc}, not ZIPCCL_ERR_BUFFER_TOO_SMALL"
bad = frames[:-100]  # no checksum in the format: a cut, not a flipped bit, is what is always detected
rc = lib.zipccl_decompress(bad.ctypes.data, bad.nbytes, out.ctypes.data, out.nbytes, ctypes.byref(got), 1, ISA_AUTO)
assert rc == -4, f"a truncated stream: status {rc}, not ZIPCCL_ERR_TRUNCATED"
message = lib.zipccl_last_error().decode()
assert message, "no error message"
print(f"{platform.machine()} Python {platform.python_version()} numpy {np.__version__}: {simd.value.decode()}, "
      f"{src.nbytes} -> {written.value} bytes, frames == tool's, round trip bit-exact; truncated: {message}")
