"""A Vision Transformer from timm: patch embedding, class token, learned positions, pre-norm
attention blocks and a classifier head, built by timm's own code with random weights
(nothing is downloaded)."""

import timm
import torch


def load(size: int = 32, patch: int = 8, dim: int = 64, depth: int = 2, heads: int = 4, classes: int = 10):
    torch.manual_seed(0)
    return timm.models.vision_transformer.VisionTransformer(
        img_size=size, patch_size=patch, embed_dim=dim, depth=depth, num_heads=heads, num_classes=classes).eval()


def inputs(size: int = 32, patch: int = 8, dim: int = 64, depth: int = 2, heads: int = 4, classes: int = 10):
    return (torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1)),)
