"""An autotuned copy kernel: two configurations, of which the autotuner keeps one."""

import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 256}, num_warps=4)],
                 key=["n"])
@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


def custom_kernel(data):
    y = torch.empty_like(data)
    _copy[lambda meta: (triton.cdiv(data.numel(), meta["BLOCK"]),)](data, y, data.numel())
    return y
