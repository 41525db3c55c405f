"""The host side shared by the CuPy scripts that run the demo's resident kernel
(`tools/resident-kernel.py`, `tools/diag/self_clocked.py`): zeroed pinned buffers, and the
NumPy reference of f, g and h that their outputs are checked against.
"""
import numpy as np

# The demo's intensity (rounds of each kernel's loop: `--intensity`, default 8).
K = 8


def pinned(words, dtype=np.uint32):
    """`words` zeroed elements of pinned host memory: (the allocation, a NumPy view of it)."""
    import cupy as cp

    mem = cp.cuda.alloc_pinned_memory(words * np.dtype(dtype).itemsize)
    a = np.frombuffer(mem, dtype, words)
    a[:] = 0
    return mem, a


def reference(v, k=K):
    """f, g and h of every element of `v` at intensity k, as the kernels compute them."""
    v, m = v.astype(np.uint64), 0xFFFFFFFF
    x = v.copy()
    for _ in range(k):
        x = (x * 1664525 + 1013904223) & m
    y = v.copy()
    for _ in range(k):
        y ^= (y << 13) & m
        y ^= y >> 17
        y ^= (y << 5) & m
    r = x ^ (((y << 7) & m) | (y >> 25))
    for _ in range(k):
        r = (r * 0x2545F491) & m
        r = (((r << 11) & m) | (r >> 21)) ^ 0x9E3779B9
    return r.astype(np.uint32)
