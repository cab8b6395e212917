"""LLaMA decoder layers over a hidden state: the repeated block of a whole model, streamed layer by layer."""
