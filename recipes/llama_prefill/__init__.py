"""LLaMA prefill recipe: a prompt through the block; only the last token's logits are used."""
