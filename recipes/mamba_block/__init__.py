"""Mamba block recipe: a selective state-space layer over 32 tokens, its scan one op."""
