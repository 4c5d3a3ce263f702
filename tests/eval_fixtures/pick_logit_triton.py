"""A Triton candidate for pick_logit.py that insists on receiving int64 targets."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _pick(L, T, Y, n_rows, stride, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = rows < n_rows
    t = tl.load(T + rows, mask=mask, other=0)
    v = tl.load(L + rows * stride + t, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + rows, (v * 2.0).to(Y.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, logits, targets):
        if targets.dtype != torch.int64:
            raise TypeError(f"targets arrived as {targets.dtype}")
        y = torch.empty(logits.shape[0], dtype=logits.dtype, device=logits.device)
        _pick[(triton.cdiv(logits.shape[0], 32),)](logits, targets, y, logits.shape[0], logits.stride(0), BLOCK=32)
        return y
