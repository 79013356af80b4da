"""A KernelBench-style problem file: one square matrix multiplication, C = A @ B.

Written for kgit's offline import example after the public definition of KernelBench's
level-1 square matmul: `Model` is the PyTorch program to make fast, `get_inputs()` the
tensors of one call, `get_init_inputs()` what Model is built with.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B for two square float32 matrices of size N."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


N = 2048


def get_inputs():
    A = torch.randn(N, N)
    B = torch.randn(N, N)
    return [A, B]


def get_init_inputs():
    return []
