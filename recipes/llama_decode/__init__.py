"""LLaMA decode recipe: one decoder step with the KV cache as graph inputs and outputs."""
