# python codec.py: the codec on numpy arrays and torch tensors (the frames `zipccl compress` writes)
import ml_dtypes
import numpy as np
import torch

import zipccl

grads = (np.random.default_rng(0).standard_normal(1 << 20) * 1e-3).astype(ml_dtypes.bfloat16)
frame = zipccl.compress(grads, threads=2)  # bf16 from the dtype; the GIL is released meanwhile
print(f"{grads.nbytes} -> {len(frame)} bytes ({grads.nbytes / len(frame):.3f}x)", zipccl.frames(frame)[0])
assert zipccl.decompress(frame).tobytes() == grads.tobytes()  # bit for bit

t = torch.randn(1024, 1024).to(torch.float16)  # a CPU tensor, read in place
out = torch.empty_like(t)
zipccl.decompress(zipccl.compress(t), out=out)
assert torch.equal(out, t)

r = zipccl.inspect(grads)  # the figures of `zipccl inspect`
print({k: r[k] for k in ("dtype", "ratio", "entropy_bits", "bound_ratio", "exponent_summary")})
try:
    zipccl.decompress(frame[:100])
except zipccl.FormatError as e:
    print("FormatError:", e)
