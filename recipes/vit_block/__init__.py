"""ViT block recipe: LayerNorm, multi-head attention, GELU MLP."""
