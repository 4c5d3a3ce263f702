"""Seed kernel for the log_softmax problem: one row per program, looped over fixed-size blocks.

Pass one keeps a running (max, sum of exp) over the row's blocks; pass two writes
y = x - (max + log(sum)).
A fixed block keeps the kernel compiling and correct at any width (a 50257 vocabulary included),
at the price of reading x twice.
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _log_softmax_fwd(X, Y, stride_x, stride_y, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * stride_x
    y_row = Y + row * stride_y
    cols = tl.arange(0, BLOCK_N)
    m = float("-inf")
    s = 0.0
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        # exp(-inf) = 0 rescales the empty first sum and drops masked lanes.
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    lse = m + tl.log(s)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        y = x - lse
        tl.store(y_row + start + cols, y.to(Y.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    # Widest block per loop step; an instance may lower it (tests do, to loop at tiny widths).
    max_block_n = 4096

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-1]
        x2 = x.reshape(-1, n).contiguous()
        y = torch.empty_like(x2)
        block = min(triton.next_power_of_2(n), self.max_block_n)
        num_warps = min(max(block // 256, 1), 16)
        _log_softmax_fwd[(x2.shape[0],)](
            x2,
            y,
            x2.stride(0),
            y.stride(0),
            n,
            BLOCK_N=block,
            num_warps=num_warps,
        )
        return y.reshape(x.shape)
