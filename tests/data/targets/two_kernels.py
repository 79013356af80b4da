"""Row sums in two launches: partial sums per column block, then a second kernel adds them.

Both kernels are module globals, so each one's globals name the other: the compile of
either must not chase the other's globals forever.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def partial_sums(x_ptr, part_ptr, cols, n_parts, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    part = tl.program_id(1)
    offs = part * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=0.0)
    tl.store(part_ptr + row * n_parts + part, tl.sum(x, axis=0))


@triton.jit
def add_parts(part_ptr, out_ptr, n_parts, PARTS: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, PARTS)
    p = tl.load(part_ptr + row * n_parts + offs, mask=offs < n_parts, other=0.0)
    tl.store(out_ptr + row, tl.sum(p, axis=0))


def custom_kernel(data):
    (x,) = data
    rows, cols = x.shape
    block = 64
    n_parts = triton.cdiv(cols, block)
    parts = torch.empty(rows, n_parts, device=x.device, dtype=torch.float32)
    out = torch.empty(rows, device=x.device, dtype=torch.float32)
    partial_sums[(rows, n_parts)](x, parts, cols, n_parts, BLOCK=block)
    add_parts[(rows,)](parts, out, n_parts, PARTS=triton.next_power_of_2(n_parts))
    return out
