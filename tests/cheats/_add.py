# Shared honest vector_add body, pasted into each vector_add cheat by load_cheat().
import torch
import triton
import triton.language as tl


@triton.jit
def _add(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(a_ptr + offsets, mask=mask) + tl.load(b_ptr + offsets, mask=mask), mask=mask)


def honest_add(a, b, out, n=None):
    n = a.numel() if n is None else n
    if n:
        _add[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024)
    return out
