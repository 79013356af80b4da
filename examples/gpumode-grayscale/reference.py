"""Reference for the grayscale problem: the luma of every pixel of an RGB image."""

import torch

from task import input_t, output_t

# ITU-R BT.601 luma weights for R, G and B.
WEIGHTS = (0.2989, 0.5870, 0.1140)


def generate_input(size: int, seed: int) -> input_t:
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    return torch.rand((size, size, 3), device="cuda", dtype=torch.float32, generator=gen).contiguous()


def ref_kernel(data: input_t) -> output_t:
    weights = torch.tensor(WEIGHTS, device=data.device, dtype=torch.float64)
    return (data.double() * weights).sum(dim=-1).float()


def check_implementation(data: input_t, output: output_t) -> tuple[bool, str]:
    expected = ref_kernel(data)
    if output.shape != expected.shape:
        return False, f"the output has shape {tuple(output.shape)}, expected {tuple(expected.shape)}"
    # Three products and two sums in fp32: a few ulp of a value in [0, 1].
    if not torch.allclose(output, expected, rtol=1e-5, atol=1e-6):
        worst = (output - expected).abs().max().item()
        return False, f"the largest difference is {worst:.3g}, beyond rtol 1e-5 and atol 1e-6"
    return True, ""
