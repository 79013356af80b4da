"""Baseline softmax: one Triton program per row, the whole row in registers."""

import torch
import triton
import triton.language as tl

# Tunable parameters: `# kgit: tune` lists the values the offline strategist may try.
NUM_WARPS = 4  # kgit: tune 1 2 4 8 16
NUM_STAGES = 1  # kgit: tune 1 2 3


@triton.jit
def _softmax_row(x_ptr, y_ptr, cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < cols
    x = tl.load(x_ptr + row * stride_x + offsets, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * stride_y + offsets, e / tl.sum(e, axis=0), mask=mask)


def custom_kernel(data):
    x = data
    rows, cols = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    _softmax_row[(rows,)](x, y, cols, x.stride(0), y.stride(0), BLOCK=block,
                          num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    return y
