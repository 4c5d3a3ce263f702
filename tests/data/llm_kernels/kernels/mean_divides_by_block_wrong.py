import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mean_kernel(x_ptr, out_ptr, D1, D2, BLOCK_R: tl.constexpr):
    b = tl.program_id(0)
    j = tl.program_id(1)
    r = tl.arange(0, BLOCK_R)
    vals = tl.load(x_ptr + b * D1 * D2 + r * D2 + j, mask=r < D1, other=0.0)
    tl.store(out_ptr + b * D2 + j, tl.sum(vals, axis=0) / BLOCK_R)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        B, D1, D2 = x.shape
        out = torch.empty(B, D2, device=x.device, dtype=x.dtype)
        mean_kernel[(B, D2)](x.contiguous(), out, D1, D2, BLOCK_R=triton.next_power_of_2(D1))
        return out
