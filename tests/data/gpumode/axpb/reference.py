"""A tiny problem in the pmpp_v2 style: the output buffer travels in the inputs,
and the reference returns a fresh tensor without reading it."""

import torch
from task import input_t, output_t


def generate_input(size: int, seed: int) -> input_t:
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    a = torch.randn(size, device="cuda", dtype=torch.float32, generator=gen)
    b = torch.randn(size, device="cuda", dtype=torch.float32, generator=gen)
    output = torch.empty(size, device="cuda", dtype=torch.float32)
    return a, b, output


def ref_kernel(data: input_t) -> output_t:
    a, b, output = data
    return 2 * a + b
