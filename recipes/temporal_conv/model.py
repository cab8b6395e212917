"""A temporal convolution stack (an audio front end): a 3-tap convolution over mel
features, then residual 3-tap convolutions with dilations 2, 4, 8, then a 1x1 projection.
Every convolution keeps the length ("same" padding = dilation)."""

import torch
from torch import nn

DILATIONS = (2, 4, 8)


class TemporalConv(nn.Module):
    def __init__(self, mels: int, channels: int, out_channels: int):
        super().__init__()
        self.conv_in = nn.Conv1d(mels, channels, 3, padding=1)
        self.dilated = nn.ModuleList(nn.Conv1d(channels, channels, 3, padding=d, dilation=d) for d in DILATIONS)
        self.proj = nn.Conv1d(channels, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv_in(x))
        for conv in self.dilated:
            x = x + torch.relu(conv(x))
        return self.proj(x)


def load(length: int = 256, mels: int = 40, channels: int = 64, out_channels: int = 32) -> TemporalConv:
    with torch.random.fork_rng(devices=[]):  # construction draws from the global RNG: keep it untouched
        model = TemporalConv(mels, channels, out_channels)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for conv in model.modules():
            if isinstance(conv, nn.Conv1d):
                bound = conv.weight[0].numel() ** -0.5
                conv.weight.uniform_(-bound, bound, generator=generator)
                conv.bias.uniform_(-bound, bound, generator=generator)
    return model.eval()


def inputs(length: int = 256, mels: int = 40, channels: int = 64, out_channels: int = 32) -> tuple[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(1, mels, length, generator=generator),)
