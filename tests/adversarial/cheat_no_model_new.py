"""Defines a kernel and a module, but not under the contract's name."""
import torch
from torch import nn


class LayerNormTriton(nn.Module):
    def forward(self, x):
        return x
