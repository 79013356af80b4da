"""A tiny GPU MODE-style problem: out[i, j] = x[i, j] * scale[i]."""

import torch
from task import input_t, output_t
from utils import make_checker, pick_device


def generate_input(rows: int, cols: int, seed: int) -> input_t:
    gen = torch.Generator(device=pick_device()).manual_seed(seed)
    x = torch.randn(rows, cols, generator=gen, device=pick_device())
    scale = torch.rand(rows, generator=gen, device=pick_device()) + 0.5
    return x, scale, torch.empty_like(x)


def ref_kernel(data: input_t) -> output_t:
    x, scale, out = data
    out.copy_(x * scale[:, None])
    return out


check_implementation = make_checker(ref_kernel, rtol=1e-5, atol=1e-6)
