"""Reference for fp8_blockscale_gemm: C = (A * a_scale) @ (B * b_scale)^T, rounded to bf16.

A is M x K and B is N x K, both fp8 and column-major; a_scale holds one fp32 scale per
row of A per 128-wide block of K, b_scale one per 128 x 128 block of B. The check does
not use allclose: see check_implementation.
"""

import torch

SCALE_BLOCK = 128
# Allowance per element: one bf16 ulp of the exact value (any rounding mode), plus
# this fraction of sum_k |a_ik b_jk| (the natural scale of dot-product rounding
# error). Hopper's fp8 tensor cores keep about 14 bits while they add products, so
# their error stays under 2^-13 of that sum per K block; 2^-9 leaves 16x headroom.
ULP_BF16 = 2.0 ** -7
ACCUMULATION = 2.0 ** -9
# Largest relative Frobenius error allowed on any piece of one row 128 columns wide.
# A correct kernel is bounded by bf16 rounding (2^-8 = 3.9e-3; about 1e-3 in practice);
# dropping one K block of 56 costs 0.13, a wrong scale block 0.1 or more.
SEGMENT = 1e-2


def _device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def fp8_dtype():
    """float8_e4m3fnuz on MI300 (gfx942), float8_e4m3fn on NVIDIA, newer AMD and the CPU."""
    if torch.cuda.is_available() and getattr(torch.version, "hip", None):
        arch = torch.cuda.get_device_properties(torch.cuda.current_device()).gcnArchName
        if arch.split(":")[0] == "gfx942":
            return torch.float8_e4m3fnuz
    return torch.float8_e4m3fn


def _cdiv(a, b):
    return -(-a // b)


def generate_input(m: int, n: int, k: int, seed: int):
    dev = _device()
    gen = torch.Generator(device=dev).manual_seed(seed)
    kb, nb = _cdiv(k, SCALE_BLOCK), _cdiv(n, SCALE_BLOCK)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=dev, dtype=torch.float32)

    # Generated transposed, so that .T gives the column-major layouts of the definition.
    a = randn(k, m).to(fp8_dtype()).T
    b = randn(k, n).to(fp8_dtype()).T
    a_scale = randn(kb, m).T
    b_scale = randn(kb, nb).T
    c = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
    return a, b, a_scale, b_scale, c


def dequantize(a, b, a_scale, b_scale, dtype=torch.float32):
    """A and B with their block scales applied, as `dtype` (M x K and N x K)."""
    n = b.shape[0]
    sb = b_scale.repeat_interleave(SCALE_BLOCK, dim=0)[:n]
    return _scaled(a, a_scale, dtype), _scaled(b, sb, dtype)


def _scaled(x, scales, dtype):
    """x (R x K) times its per-row, per-K-block `scales` (R x ceil(K/128)), as `dtype`. The
    scales are broadcast over each block rather than repeated out to R x K in memory."""
    rows, k = x.shape
    blocks = scales.shape[1]
    full = x.to(dtype)
    if k != blocks * SCALE_BLOCK:
        full = torch.nn.functional.pad(full, (0, blocks * SCALE_BLOCK - k))
    scaled = full.view(rows, blocks, SCALE_BLOCK) * scales.to(dtype)[:, :, None]
    return scaled.view(rows, blocks * SCALE_BLOCK)[:, :k]


def ref_kernel(data):
    a, b, a_scale, b_scale, c = data
    da, db = dequantize(a, b, a_scale, b_scale)
    c.copy_((da @ db.T).to(torch.bfloat16))
    return c


def check_implementation(data, output):
    """(ok, message): bf16 output within rounding and reduced-precision accumulation of the exact product.

    An elementwise allclose cannot be used: outputs near zero come from cancelling sums of
    size ~sqrt(K), so their error is set by the terms, not by the output (a correct Hopper
    kernel fails allclose(rtol=2e-2, atol=1e-3)). Two tests instead, both relative to
    quantities a correct kernel provably stays within:
    1. every element: |c - exact| <= ULP_BF16 |exact| + ACCUMULATION sum_k |a_ik b_jk|;
    2. every row piece of 128 columns: ||c - exact|| <= SEGMENT ||exact||. A skipped K
       block, a misapplied scale block or one wrong tile each spoil whole row pieces.
    """
    a, b, a_scale, b_scale, _ = data
    m, n = a.shape[0], b.shape[0]
    if not isinstance(output, torch.Tensor):
        return False, f"expected a tensor, got {type(output).__name__}"
    if tuple(output.shape) != (m, n) or output.dtype != torch.bfloat16:
        return False, f"expected a bfloat16 tensor of shape ({m}, {n}), got {output.dtype} {tuple(output.shape)}"
    got = output.detach().to(a.device, torch.float32)  # bf16 to float32 is exact
    da, db = dequantize(a, b, a_scale, b_scale, torch.float64)
    # Only the product needs float64 (the float32 sum of K terms would spend a visible share of
    # the allowance); rounded once to float32 it is within 2^-24 of itself, far inside one bf16
    # ulp, so the elementwise tests run in float32 at half the memory traffic.
    exact = (da @ db.T).to(torch.float32)
    # The allowance's scale needs no float64: bf16 operands and result put it within about 1%
    # of the float64 sum (all terms positive), against the 16x headroom above, and the bf16
    # product runs on tensor cores where a second float64 one was half of the check's time.
    magnitude = (da.to(torch.bfloat16).abs_() @ db.to(torch.bfloat16).abs_().T).to(torch.float32)
    del da, db
    diff = (got - exact).abs_()  # NaN wherever `got` is not finite
    excess = diff - (exact.abs().mul_(ULP_BF16).add_(magnitude, alpha=ACCUMULATION))
    del magnitude
    pad = _cdiv(n, SCALE_BLOCK) * SCALE_BLOCK - n
    err = torch.nn.functional.pad(diff, (0, pad)).reshape(m, -1, SCALE_BLOCK).norm(dim=2)
    ref = torch.nn.functional.pad(exact, (0, pad)).reshape(m, -1, SCALE_BLOCK).norm(dim=2)
    rel = err / ref.clamp_min(torch.finfo(torch.float32).tiny)
    # Every output of a timed call is checked: the verdict's figures are read back in one
    # transfer (each read is a wait for the device), the details only when one of them fails.
    figures = torch.stack([(~torch.isfinite(got)).sum().to(torch.float32), (excess > 0).sum().to(torch.float32),
                           (rel > SEGMENT).sum().to(torch.float32), rel.max(),
                           diff.norm() / exact.norm(), diff.max()]).tolist()
    nonfinite, over, pieces, worst, total, largest = figures
    if nonfinite:
        return False, f"{int(nonfinite)} of {got.numel()} outputs are NaN or Inf"
    if over:
        i, j = divmod(int(torch.argmax(excess)), n)
        return False, (f"{int(over)} of {m * n} elements are off by more than rounding allows; "
                       f"worst at ({i}, {j}): got {float(output[i, j]):.6g}, expected {float(exact[i, j]):.6g}")
    if pieces:
        i, piece = divmod(int(torch.argmax(rel)), rel.shape[1])
        return False, (f"{int(pieces)} row pieces of 128 columns have a relative error above "
                       f"{SEGMENT:g}; worst: row {i}, columns {piece * SCALE_BLOCK}..{min(n, (piece + 1) * SCALE_BLOCK) - 1}, "
                       f"{worst:.3g}")
    return True, f"relative Frobenius error {total:.2e}, max abs error {largest:.3g}"
