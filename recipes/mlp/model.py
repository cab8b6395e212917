"""MLP: 256 -> 1024 -> 1024 -> 256, ReLU between, bias on every layer."""

import torch
from torch import nn
from torch.nn.utils import skip_init

DIMS = (256, 1024, 1024, 256)


class Mlp(nn.Module):
    def __init__(self, dims: tuple[int, ...] = DIMS):
        super().__init__()
        # skip_init: no draw from the global RNG; load() fills the weights.
        self.fc1 = skip_init(nn.Linear, dims[0], dims[1])
        self.fc2 = skip_init(nn.Linear, dims[1], dims[2])
        self.fc3 = skip_init(nn.Linear, dims[2], dims[3])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


def load(batch: int = 128) -> Mlp:
    model = Mlp()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for layer in (model.fc1, model.fc2, model.fc3):
            bound = layer.in_features**-0.5  # PyTorch's default Linear init range
            layer.weight.uniform_(-bound, bound, generator=generator)
            layer.bias.uniform_(-bound, bound, generator=generator)
    return model.eval()


def inputs(batch: int = 128) -> tuple[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(batch, DIMS[0], generator=generator),)
