import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def cumprod_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    carry = tl.full([1], 1.0, dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=1.0).to(tl.float32)
        p = tl.associative_scan(x, 0, _mul)
        tl.store(y_ptr + row * n_cols + cols, p * carry, mask=mask)
        carry = carry * tl.reduce(x, 0, _mul)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super(ModelNew, self).__init__()
        self.dim = dim

    def forward(self, x):
        x = x.to(device='cuda').contiguous()
        y = torch.empty_like(x)
        cumprod_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=1024)
        return y
