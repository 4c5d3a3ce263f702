"""Row-wise scale with a 2-D grid (rows along y): exceeds CUDA's 65535 when the rows do."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(1)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=m)
    tl.store(y_ptr + row * n_cols + offs, x * 2.0, mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        assert x.is_cuda
        rows, cols = x.shape
        y = torch.empty_like(x)
        scale_kernel[(triton.cdiv(cols, 64), rows)](x, y, cols, BLOCK=64)
        return y
