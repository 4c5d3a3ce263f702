"""Seed kernel for the cross_entropy problem: one row per program, one looped pass over the logits.

loss = logsumexp(row) - row[target], with logsumexp kept as a running (max, sum of exp) over
fixed-size blocks so a 128256-wide vocabulary compiles and stays stable.
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _cross_entropy_fwd(X, T, L, stride_x, V, BLOCK_V: tl.constexpr):
    # int64 row offsets: 16384 rows x 128256 logits passes 2**31.
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * stride_x
    cols = tl.arange(0, BLOCK_V)
    m = float("-inf")
    s = 0.0
    for start in range(0, V, BLOCK_V):
        mask = start + cols < V
        x = tl.load(x_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    target = tl.load(T + row)
    x_target = tl.load(x_row + target).to(tl.float32)
    loss = m + tl.log(s) - x_target
    tl.store(L + row, loss.to(L.dtype.element_ty))


class ModelNew(nn.Module):
    # Widest block per loop step; an instance may lower it (tests do, to loop at tiny widths).
    max_block_v = 4096

    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        v = logits.shape[-1]
        x2 = logits.reshape(-1, v).contiguous()
        t = targets.reshape(-1).contiguous()
        loss = torch.empty(x2.shape[0], dtype=logits.dtype, device=logits.device)
        block = min(triton.next_power_of_2(v), self.max_block_v)
        num_warps = min(max(block // 256, 1), 16)
        _cross_entropy_fwd[(x2.shape[0],)](
            x2,
            t,
            loss,
            x2.stride(0),
            v,
            BLOCK_V=block,
            num_warps=num_warps,
        )
        return loss.reshape(logits.shape[:-1])
