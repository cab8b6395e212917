"""A ResNet basic block: conv 3x3, batch norm, ReLU, conv 3x3, batch norm, identity
residual, ReLU (ResNet-18's first stage: 64 channels at 56x56 by default)."""

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + x)


def load(channels: int = 64, size: int = 56) -> BasicBlock:
    with torch.random.fork_rng(devices=[]):  # construction draws from the global RNG: keep it untouched
        model = BasicBlock(channels)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for conv in (model.conv1, model.conv2):
            conv.weight.normal_(0.0, (2.0 / conv.weight[0].numel()) ** 0.5, generator=generator)  # Kaiming
        for bn in (model.bn1, model.bn2):  # as a trained checkpoint would have them: nothing is 0 or 1
            bn.weight.uniform_(0.5, 1.5, generator=generator)
            bn.bias.uniform_(-0.2, 0.2, generator=generator)
            bn.running_mean.uniform_(-0.2, 0.2, generator=generator)
            bn.running_var.uniform_(0.5, 2.0, generator=generator)
    return model.eval()


def inputs(channels: int = 64, size: int = 56) -> tuple[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(1, channels, size, size, generator=generator),)
