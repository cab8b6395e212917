"""ResNet basic block recipe: batch norm folded into the convolutions by a frontend step."""
