import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def l2_normalize(x_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    norm = tl.sqrt(tl.sum(x * x, axis=0))
    tl.store(out_ptr + row * n_cols + cols, x / norm, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        assert x.is_cuda
        rows, cols = x.shape
        out = torch.empty_like(x)
        # one block per row; 1024 covers typical hidden sizes
        l2_normalize[(rows,)](x, out, cols, BLOCK_SIZE=1024)
        return out
