"""Baseline fp8 block-scaled GEMM: one Triton program per BLOCK_M x BLOCK_N tile of C.

Each step of the K loop multiplies one fp8 tile pair on the tensor cores, scales the
fp32 partial product by the row scales of A and the block scales of B, and adds it to
an fp32 accumulator. Inputs are read through their strides as they come (column-major),
which is simple but not what fp8 tensor cores want: that is left to `kgit evolve`.
"""

import torch
import triton
import triton.language as tl

# Tunable parameters: `# kgit: tune` lists the values the offline strategist may try.
BLOCK_M = 64  # kgit: tune 32 64 128
BLOCK_N = 128  # kgit: tune 64 128 256
BLOCK_K = 128  # kgit: tune 32 64 128
GROUP_M = 8  # kgit: tune 1 4 8 16
NUM_WARPS = 4  # kgit: tune 2 4 8
NUM_STAGES = 3  # kgit: tune 1 2 3 4 5

# The scales cover 128 x 128 blocks; a K step must stay inside one scale block.
SCALE_BLOCK = 128


@triton.jit
def _blockscale_gemm(
    a_ptr, b_ptr, as_ptr, bs_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bn, stride_bk,
    stride_asm, stride_ask, stride_bsn, stride_bsk, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, SCALE_BLOCK: tl.constexpr,
):
    # Grouped order: GROUP_M row tiles share their B columns while those are in L2.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_m = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        k_ok = kk < K
        a = tl.load(a_ptr + rm[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        kb = k0 // SCALE_BLOCK
        sa = tl.load(as_ptr + rm * stride_asm + kb * stride_ask, mask=m_ok, other=0.0)
        # One B scale per 128 columns; a tile of 256 columns spans two of them.
        sb = tl.load(bs_ptr + (rn // SCALE_BLOCK) * stride_bsn + kb * stride_bsk, mask=n_ok, other=0.0)
        acc += tl.dot(a, b) * sa[:, None] * sb[None, :]
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc.to(tl.bfloat16), mask=m_ok[:, None] & n_ok[None, :])


def custom_kernel(data):
    a, b, a_scale, b_scale, c = data
    m, k = a.shape
    n = b.shape[0]
    assert SCALE_BLOCK % BLOCK_K == 0, "BLOCK_K must divide the 128-wide scale blocks"
    grid = (triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N),)
    _blockscale_gemm[grid](
        a, b, a_scale, b_scale, c, m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        a_scale.stride(0), a_scale.stride(1), b_scale.stride(0), b_scale.stride(1),
        c.stride(0), c.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, SCALE_BLOCK=SCALE_BLOCK,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    return c
