"""Seed kernel for the row_sum problem: one row per program, looped, a per-lane fp32 accumulator.

Per-lane partial sums, reduced once at the end, keep the rounding error low on long rows.
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _row_sum_fwd(X, Y, stride_x, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * stride_x
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        acc += tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row, tl.sum(acc, axis=0).to(Y.dtype.element_ty))


class ModelNew(nn.Module):
    # Widest block per loop step; an instance may lower it (tests do, to loop at tiny widths).
    max_block_n = 4096

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-1]
        x2 = x.reshape(-1, n).contiguous()
        y = torch.empty(x2.shape[0], dtype=x.dtype, device=x.device)
        block = min(triton.next_power_of_2(n), self.max_block_n)
        num_warps = min(max(block // 256, 1), 16)
        _row_sum_fwd[(x2.shape[0],)](x2, y, x2.stride(0), n, BLOCK_N=block, num_warps=num_warps)
        return y.reshape(x.shape[:-1])
