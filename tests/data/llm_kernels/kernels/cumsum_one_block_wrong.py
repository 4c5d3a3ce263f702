import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scan_row(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * n_cols + cols, tl.cumsum(x, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        assert x.is_cuda
        rows, cols = x.shape
        y = torch.empty_like(x)
        scan_row[(rows,)](x.contiguous(), y, cols, BLOCK=min(triton.next_power_of_2(cols), 1024))
        return y
