"""Benchmarks run from a checkout (not installed): `python -m benchmarks.peers` on a GPU host."""
