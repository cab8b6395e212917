"""MLP recipe: three linear layers with ReLU between."""
