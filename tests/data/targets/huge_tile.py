"""A matmul with an absurd tile: by default 32 x 32 output tiles over 256-wide fp16 K steps, four stages."""

import torch
import triton
import triton.language as tl


@triton.jit
def _matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :], mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :], mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def custom_kernel(data, block=32, block_k=256, stages=4):
    a, b = data
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty(m, n, dtype=torch.float16)
    _matmul[(triton.cdiv(m, block), triton.cdiv(n, block))](a, b, c, m, n, k, BM=block, BN=block, BK=block_k,
                                                              num_warps=4, num_stages=stages)
    return c
