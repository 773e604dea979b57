"""The codec from Python: round trips of every type and odd sizes, frames equal to the C++ tool's,
arrays, tensors and bytes in and out, malformed frames, the GIL released while coding."""
import threading
import time

import ml_dtypes
import numpy as np
import pytest

import zipccl

try:
    import torch
except ImportError:  # the codec's tests need no torch; the tensor test is skipped
    torch = None

SIZES = [0, 1, 7, 1023, 16385, 100003]  # elements: empty, tiny, one short block, several blocks
NP_TYPES = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32}
TORCH_TYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def gradient_like(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * 1e-3).astype(dtype)


@pytest.mark.parametrize("name", NP_TYPES)
@pytest.mark.parametrize("n", SIZES)
def test_numpy_round_trip_and_same_frames_as_the_tool(name, n, tool_compress):
    x = gradient_like(n, NP_TYPES[name], seed=n)
    frame = zipccl.compress(x)
    assert frame == tool_compress(x.tobytes(), name)
    y = zipccl.decompress(frame, dtype=x.dtype)
    assert y.dtype == x.dtype and y.shape == (n,)
    assert y.tobytes() == x.tobytes()  # bit for bit, NaN payloads and signed zeros included
    # Without dtype=: the frames' type, or bytes where the encoder stored them raw and untyped.
    default = zipccl.decompress(frame)
    assert default.tobytes() == x.tobytes()
    typed = any(f.dtype == name for f in zipccl.frames(frame))
    assert default.dtype == (x.dtype if typed else np.uint8)
    if n >= 1023:
        assert typed and len(frame) < x.nbytes
        (info,) = zipccl.frames(frame)
        assert info.kind == "coded" and info.dtype == name and info.original_size == x.nbytes


@pytest.mark.parametrize("name", TORCH_TYPES)
def test_torch_cpu_tensors_in_and_out(name):
    if torch is None:
        pytest.skip("torch is not installed")
    t = torch.randn(37, 129).to(getattr(torch, TORCH_TYPES[name]))
    frame = zipccl.compress(t)
    assert frame == zipccl.compress(t.view(-1).view(torch.uint8).numpy(), dtype=name)
    out = torch.empty_like(t)
    assert zipccl.decompress(frame, out=out) is out
    assert torch.equal(out.view(torch.uint8), t.view(torch.uint8))
    # A non-contiguous tensor codes as its contiguous copy.
    assert zipccl.compress(t.t()) == zipccl.compress(t.t().contiguous())


def test_special_values_survive():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3.4e38] * 3000, dtype=np.float32)
    x.view(np.uint32)[4] = 0x7FC00123  # a NaN with a payload
    assert zipccl.decompress(zipccl.compress(x)).tobytes() == x.tobytes()


def test_bytes_like_inputs_and_outputs(tool_compress):
    data = bytes(range(256)) * 300 + b"tail"
    frame = zipccl.compress(data)
    assert frame == tool_compress(data)  # untyped: the type is detected as the tool does
    assert zipccl.compress(bytearray(data)) == frame == zipccl.compress(memoryview(data))
    assert zipccl.decompress(frame).tobytes() == data
    out = bytearray(len(data))
    zipccl.decompress(frame, out=out)
    assert bytes(out) == data
    with pytest.raises(ValueError, match="out holds"):
        zipccl.decompress(frame, out=bytearray(len(data) + 1))
    with pytest.raises(ValueError):
        zipccl.decompress(frame, out=data)  # read-only
    with pytest.raises(TypeError):
        zipccl.compress(12345)


def test_compress_into_a_reused_buffer_writes_the_same_frames():
    x = gradient_like(70000, ml_dtypes.bfloat16)
    out = bytearray(zipccl.max_compressed_size(x.nbytes))
    n = zipccl.compress_into(x, out)
    assert bytes(out[:n]) == zipccl.compress(x)
    assert zipccl.compress_into(x[:1000], out) == len(zipccl.compress(x[:1000]))
    with pytest.raises(ValueError, match="max_compressed_size"):
        zipccl.compress_into(x, bytearray(x.nbytes))
    assert zipccl.max_compressed_size(3 << 26) > 3 << 26  # three frames' bounds


def test_explicit_dtype_and_options_give_the_tools_frames(tool_compress):
    x = gradient_like(50000, np.float32)
    raw = x.view(np.uint8)
    assert zipccl.compress(raw, dtype="fp32", block_log2=10) == tool_compress(raw.tobytes(), "fp32", "--block-log2", "10")
    assert zipccl.compress(x, threads=2, isa="scalar") == zipccl.compress(x)
    with pytest.raises(ValueError, match="block_log2"):
        zipccl.compress(x, block_log2=9)
    with pytest.raises(ValueError, match="dtype"):
        zipccl.compress(x, dtype="int8")


def test_large_inputs_are_several_frames_as_the_tool_writes(tool_compress):
    x = gradient_like((17 << 19) + 5, ml_dtypes.bfloat16)  # 17 MiB + 10 bytes: frames of 8 MiB
    frame = zipccl.compress(x)
    fs = zipccl.frames(frame)
    assert [f.original_size for f in fs] == [8 << 20, 8 << 20, (1 << 20) + 10]
    assert frame == tool_compress(x.tobytes(), "bf16")
    assert zipccl.decompress(frame).tobytes() == x.tobytes()


def test_malformed_frames_are_format_errors():
    x = gradient_like(20000, ml_dtypes.bfloat16)
    frame = zipccl.compress(x)
    assert issubclass(zipccl.FormatError, ValueError)
    with pytest.raises(zipccl.FormatError, match="empty"):
        zipccl.decompress(b"")
    with pytest.raises(zipccl.FormatError):
        zipccl.decompress(b"not a zipccl frame at all, just text")
    for cut in list(range(1, 64)) + list(range(64, len(frame), 997)):
        with pytest.raises(zipccl.FormatError):
            zipccl.decompress(frame[:cut])
    with pytest.raises(zipccl.FormatError):
        zipccl.decompress(frame + b"\0")  # trailing bytes are not a frame
    # Flipped bits anywhere: an error or some decoded bytes, never a crash.
    rng = np.random.default_rng(1)
    for _ in range(300):
        bad = bytearray(frame)
        bad[rng.integers(len(bad))] ^= 1 << int(rng.integers(8))
        try:
            zipccl.decompress(bytes(bad))
        except zipccl.FormatError:
            pass


def test_gil_is_released_while_coding():
    x = gradient_like(16 << 20, ml_dtypes.bfloat16)  # 32 MiB: tens of milliseconds per call
    ticks = 0
    stop = False

    def count():
        nonlocal ticks
        while not stop:
            ticks += 1
            time.sleep(0)

    t = threading.Thread(target=count)
    t.start()
    try:
        def ticks_during(fn):
            before = ticks
            start = time.perf_counter()
            fn()
            return ticks - before, time.perf_counter() - start

        frame = zipccl.compress(x)
        n_enc, s_enc = ticks_during(lambda: zipccl.compress(x))
        n_dec, s_dec = ticks_during(lambda: zipccl.decompress(frame))
        # The same through the caller's buffers (the loop a training step runs).
        buf = np.empty(zipccl.max_compressed_size(x.nbytes), np.uint8)
        out = np.empty_like(x)
        n_into, s_into = ticks_during(lambda: zipccl.compress_into(x, buf))
        n_out, s_out = ticks_during(lambda: zipccl.decompress(frame, out=out))
    finally:
        stop = True
        t.join()
    # Holding the GIL, the other thread would get at most a switch or two around the call.
    assert n_enc > 50, (n_enc, s_enc)
    assert n_dec > 50, (n_dec, s_dec)
    assert n_into > 50, (n_into, s_into)
    assert n_out > 50 and out.tobytes() == x.tobytes(), (n_out, s_out)


def test_inspect_reports_the_tools_figures():
    x = gradient_like(100001, ml_dtypes.bfloat16)
    r = zipccl.inspect(x)
    assert r["dtype"] == "bf16" and not r["type_detected"]
    assert r["bytes"] == x.nbytes
    assert r["compressed_bytes"] == len(zipccl.compress(x))
    assert r["ratio"] == pytest.approx(x.nbytes / r["compressed_bytes"])
    assert sum(r["exponent_counts"]) == x.size and len(r["exponent_counts"]) == 256
    lo, hi = r["exponent_range"]
    assert lo < -10 < hi <= 0
    assert 0 < r["entropy_bits"] < 16 and r["predicted_bytes"] < x.nbytes
    assert zipccl.inspect(np.zeros(1000, np.float32))["frame_kind"] == "const"
    assert zipccl.inspect(bytes(100))["type_detected"]


def test_contiguous_inputs_are_read_in_place():
    from zipccl._codec import _readable

    x = gradient_like(4096, ml_dtypes.bfloat16).reshape(64, 64)
    assert _readable(x)[0].ctypes.data == x.ctypes.data
    if torch is not None:
        t = torch.randn(64, 64).bfloat16()
        view, kind = _readable(t)
        assert kind == "bf16" and view.ctypes.data == t.data_ptr() and view.nbytes == t.numel() * 2


def test_buffer_protocol_inputs_and_outputs_are_used_in_place():
    import array
    import ctypes

    from zipccl._codec import _readable, _writable

    data = bytes(range(256)) * 64
    # bytes: the address ctypes hands a C function for it is its own storage
    assert _readable(data)[0].ctypes.data == ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value
    ba = bytearray(data)
    here = ctypes.addressof(ctypes.c_char.from_buffer(ba))
    assert _readable(ba)[0].ctypes.data == here == _writable(ba).ctypes.data
    assert _readable(memoryview(ba)[256:])[0].ctypes.data == here + 256
    fl = array.array("f", range(1000))
    view, kind = _readable(fl)
    assert view.ctypes.data == fl.buffer_info()[0] and view.nbytes == 4000 and kind == "auto"
    # Decoding into a bytearray writes that bytearray, which cannot be resized while it is exported.
    frame = zipccl.compress(data)
    out = bytearray(len(data))
    assert zipccl.decompress(frame, out=out) is out and bytes(out) == data
    with pytest.raises(ValueError, match="not C-contiguous"):
        zipccl.compress(memoryview(ba)[::2])


def test_out_must_be_contiguous_writable_and_of_the_decoded_size():
    x = gradient_like(4096, ml_dtypes.bfloat16)
    frame = zipccl.compress(x)
    strided = np.empty(8192, dtype=x.dtype)[::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        zipccl.decompress(frame, out=strided)
    ro = np.empty_like(x)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        zipccl.decompress(frame, out=ro)
    with pytest.raises(ValueError, match="out holds 8190 bytes; the frames decode to 8192"):
        zipccl.decompress(frame, out=np.empty(4095, dtype=x.dtype))
    with pytest.raises(ValueError, match="writable"):
        zipccl.compress_into(x, bytes(zipccl.max_compressed_size(x.nbytes)))
    with pytest.raises(ValueError, match="dtype must be bf16, fp16, fp32 or a numpy dtype"):
        zipccl.decompress(frame, dtype="int8")
    with pytest.raises(ValueError, match="not a whole number of float32"):
        zipccl.decompress(zipccl.compress(b"abc"), dtype=np.float32)
    if torch is not None:
        t = torch.empty(64, 128, dtype=torch.bfloat16)
        with pytest.raises(ValueError, match="contiguous CPU tensor"):
            zipccl.decompress(frame, out=t.t())
        zipccl.decompress(frame, out=t.view(-1)[:4096])
        assert t.view(-1)[:4096].view(torch.int16).numpy().tobytes() == x.tobytes()


def test_bad_options_are_errors_before_any_coding():
    x = gradient_like(1000, np.float32)
    with pytest.raises(ValueError, match="threads must be 1..1024, not 0"):
        zipccl.compress(x, threads=0)
    with pytest.raises(ValueError, match="threads must be 1..1024, not 1025"):
        zipccl.decompress(zipccl.compress(x), threads=1025)
    with pytest.raises(ValueError, match="isa must be auto, scalar, avx2, avx512 or neon"):
        zipccl.compress(x, isa="sse9")
    with pytest.raises(TypeError):
        zipccl.compress(x, threads=1.5)
    with pytest.raises(ValueError):
        zipccl.compress(x, threads=1 << 32)  # not wrapped to 0 by ctypes

