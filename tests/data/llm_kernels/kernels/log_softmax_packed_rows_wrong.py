import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def log_softmax_packed(x_ptr, y_ptr, n_rows, n_cols, ROWS_PER_PROG: tl.constexpr, BLOCK_N: tl.constexpr):
    # several short rows share one program
    pid = tl.program_id(0)
    for r in range(ROWS_PER_PROG):
        row = pid * ROWS_PER_PROG + r
        if row < n_rows:
            cols = tl.arange(0, BLOCK_N)
            mask = cols < n_cols
            x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
            m = tl.max(x, axis=0)
            z = x - m
            lse = tl.log(tl.sum(tl.exp(z), axis=0))
            tl.store(y_ptr + row * n_cols + cols, z - lse, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        assert x.is_cuda
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        block_n = triton.next_power_of_2(n_cols)
        rows_per_prog = BLOCK // n_cols  # pack rows into one 1024-wide block
        grid = (triton.cdiv(n_rows, rows_per_prog),)
        log_softmax_packed[grid](x, y, n_rows, n_cols, ROWS_PER_PROG=rows_per_prog, BLOCK_N=block_n)
        return y
