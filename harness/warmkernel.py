"""The kernel a runner started ahead of need compiles before its candidate exists (jitwarm.py).

Imported only on a GPU, once the runner has decided against Triton's interpreter."""

import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, y_ptr, n, factor, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * factor, mask=mask)
