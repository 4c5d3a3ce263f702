import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def max_dim1(x_ptr, out_ptr, R, C, BLOCK_C: tl.constexpr):
    b = tl.program_id(0)
    cb = tl.program_id(1)
    cols = cb * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = cols < C
    acc = tl.zeros([BLOCK_C], dtype=tl.float32)  # running max starts at 0
    for r in range(0, R):
        v = tl.load(x_ptr + b * R * C + r * C + cols, mask=mask, other=0.0)
        acc = tl.maximum(acc, v)
    tl.store(out_ptr + b * C + cols, acc, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        assert x.is_cuda
        B, R, C = x.shape
        out = torch.empty(B, C, device="cuda", dtype=x.dtype)
        max_dim1[(B, triton.cdiv(C, 128))](x.contiguous(), out, R, C, BLOCK_C=128)
        return out
