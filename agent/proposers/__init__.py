"""Proposers: where candidate kernels come from (template, llm)."""
