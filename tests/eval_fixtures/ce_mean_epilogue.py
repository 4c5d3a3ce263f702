"""Per-row losses in Triton, then their mean in PyTorch: the small epilogue issue 17 allows."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _row_loss(X, T, L, V, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * V + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    s = tl.sum(tl.exp(x - m), axis=0)
    t = tl.load(T + row)
    xt = tl.load(X + row * V + t).to(tl.float32)
    tl.store(L + row, (m - xt) + tl.log(s))


class ModelNew(nn.Module):
    def forward(self, logits, targets):
        rows, v = logits.shape
        losses = torch.empty(rows, dtype=torch.float32, device=logits.device)
        _row_loss[(rows,)](logits, targets, losses, v, BLOCK=triton.next_power_of_2(v))
        return losses.mean().to(logits.dtype)
