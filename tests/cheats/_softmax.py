# Shared honest softmax body, pasted into each softmax cheat by load_cheat().
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_row(x_ptr, y_ptr, cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < cols
    x = tl.load(x_ptr + row * stride_x + offsets, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * stride_y + offsets, e / tl.sum(e, axis=0), mask=mask)


def honest_softmax(x, y=None):
    y = torch.empty_like(x) if y is None else y
    rows, cols = x.shape
    _softmax_row[(rows,)](x, y, cols, x.stride(0), y.stride(0), BLOCK=triton.next_power_of_2(cols))
    return y
