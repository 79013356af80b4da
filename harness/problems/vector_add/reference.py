"""Reference for vector_add: out = a + b in float32."""

import torch


def _device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def generate_input(size: int, seed: int):
    gen = torch.Generator(device=_device()).manual_seed(seed)
    a = torch.randn(size, generator=gen, device=_device(), dtype=torch.float32)
    b = torch.randn(size, generator=gen, device=_device(), dtype=torch.float32)
    out = torch.empty_like(a)
    return a, b, out


def ref_kernel(data):
    a, b, out = data
    out.copy_(a + b)
    return out
