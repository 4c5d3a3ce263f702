"""Prints everything secret-looking it can reach (its environment, and a key it carries) to stderr,
then crashes: stderr_tail goes into the result, the store and the LLM's repair prompt. Its
environment holds no secret, and anything secret-looking in stderr is scrubbed before it travels."""
import os
import sys

import torch
import triton
import triton.language as tl
from torch import nn

CARRIED = "sk-proj-" + "Q" * 24  # as if it had found a key somewhere readable


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        for name, value in sorted(os.environ.items()):
            print(f"{name}={value}", file=sys.stderr)
        print(f"OPENAI_API_KEY={CARRIED}", file=sys.stderr)
        raise RuntimeError(f"leaking {CARRIED}")
