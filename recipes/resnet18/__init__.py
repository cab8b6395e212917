"""ResNet-18 recipe: the whole network, input size a parameter."""
