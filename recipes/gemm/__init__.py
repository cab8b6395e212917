"""GEMM recipe: one matrix multiply x @ w."""
