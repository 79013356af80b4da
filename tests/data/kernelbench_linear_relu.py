import torch
import torch.nn as nn


class Model(nn.Module):
    """A tiny KernelBench-style problem: a linear layer followed by ReLU."""

    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


batch_size = 4
in_features = 8
out_features = 16


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
