"""MobileNetV3-Large from torchvision: inverted residuals with depthwise 3x3 / 5x5 convs,
squeeze-and-excitation, hardswish and hardsigmoid, built by torchvision's own code with
random weights (nothing is downloaded). `width` scales every layer's channels."""

import torch
import torchvision


def load(width: float = 0.25, size: int = 32, classes: int = 10):
    torch.manual_seed(0)
    return torchvision.models.mobilenet_v3_large(weights=None, width_mult=width, num_classes=classes).eval()


def inputs(width: float = 0.25, size: int = 32, classes: int = 10):
    return (torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1)),)
