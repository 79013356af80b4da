"""The types of the grayscale problem, as GPU MODE's task.py files state them."""

from typing import TypedDict, TypeVar

import torch

input_t = TypeVar("input_t", bound=torch.Tensor)  # (size, size, 3) float32, channels last
output_t = TypeVar("output_t", bound=torch.Tensor)  # (size, size) float32


class TestSpec(TypedDict):
    size: int
    seed: int
