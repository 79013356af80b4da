"""A kernel with inline PTX: it builds for NVIDIA GPUs only (and cannot run in the interpreter).

It copies the bits of a float32 tensor through a PTX `mov`.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _copy_bits(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.int32, bitcast=True)
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(y_ptr + offsets, y, mask=mask)


def custom_kernel(data):
    x = data
    y = torch.empty(x.shape, dtype=torch.int32, device=x.device)
    _copy_bits[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
    return y.view(torch.float32)
