"""ResNet-18, written out (no torchvision): a 7x7 stem, four stages of two basic blocks
(64, 128, 256, 512 channels), global average pooling and a 1000-way linear classifier.
The input size is a parameter (224x224 by default)."""

import torch
import torch.nn.functional as F
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return torch.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        widths = (64, 128, 256, 512)
        stages, cin = [], 64
        for i, width in enumerate(widths):
            stride = 1 if i == 0 else 2
            stages.append(nn.Sequential(BasicBlock(cin, width, stride), BasicBlock(width, width, 1)))
            cin = width
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(x, 3, stride=2, padding=1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


def load(size: int = 224, batch: int = 1, classes: int = 1000) -> ResNet18:
    with torch.random.fork_rng(devices=[]):  # construction draws from the global RNG: keep it untouched
        model = ResNet18(classes)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Conv2d):  # Kaiming normal, as torchvision initialises ResNets
                module.weight.normal_(0.0, (2.0 / module.weight[0].numel()) ** 0.5, generator=generator)
            elif isinstance(module, nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5, generator=generator)
                module.bias.uniform_(-0.2, 0.2, generator=generator)
                module.momentum = None  # cumulative: the running stats become the calibration batch's
            elif isinstance(module, nn.Linear):
                bound = module.in_features ** -0.5
                module.weight.uniform_(-bound, bound, generator=generator)
                module.bias.uniform_(-bound, bound, generator=generator)
        # Stand-in for a checkpoint's statistics: one pass over a deterministic batch in
        # training mode sets every batch norm's running mean and variance from real activations.
        model.train()
        model(torch.randn(4, 3, size, size, generator=generator))
    return model.eval()


def inputs(size: int = 224, batch: int = 1, classes: int = 1000) -> tuple[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(batch, 3, size, size, generator=generator),)
