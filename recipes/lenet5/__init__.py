"""LeNet-5 recipe: two convolutions with pooling, three linear layers."""
