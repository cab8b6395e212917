"""LeNet-5: two 5x5 convolutions with max pooling, then three linear layers (32x32 input)."""

import torch
import torch.nn.functional as F
from torch import nn


class LeNet5(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = F.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


def load(batch: int = 1) -> LeNet5:
    with torch.random.fork_rng(devices=[]):  # construction draws from the global RNG: keep it untouched
        model = LeNet5()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                bound = (module.weight[0].numel()) ** -0.5  # PyTorch's default init range
                module.weight.uniform_(-bound, bound, generator=generator)
                module.bias.uniform_(-bound, bound, generator=generator)
    return model.eval()


def inputs(batch: int = 1) -> tuple[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(batch, 1, 32, 32, generator=generator),)
