"""Baseline vector_add: one Triton program per BLOCK_SIZE elements."""

import triton
import triton.language as tl

# Tunable parameters: `# kgit: tune` lists the values the offline strategist may try.
BLOCK_SIZE = 1024  # kgit: tune 256 512 1024 2048 4096
NUM_WARPS = 4  # kgit: tune 1 2 4 8


@triton.jit
def _add(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, a + b, mask=mask)


def custom_kernel(data):
    a, b, out = data
    n = a.numel()
    _add[(triton.cdiv(n, BLOCK_SIZE),)](a, b, out, n, BLOCK=BLOCK_SIZE, num_warps=NUM_WARPS)
    return out
