import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def min_reduction_kernel(x_ptr, out_ptr, B, D1, D2, BLOCK_D1: tl.constexpr):
    # one program per (b, j) output element; reduce over D1 in chunks
    pid = tl.program_id(0)
    b = pid // D2
    j = pid % D2
    acc = tl.full([BLOCK_D1], float("inf"), dtype=tl.float32)
    for start in range(0, D1, BLOCK_D1):
        i = start + tl.arange(0, BLOCK_D1)
        vals = tl.load(x_ptr + b * D1 * D2 + i * D2 + j, mask=i < D1, other=float("inf"))
        acc = tl.minimum(acc, vals)
    tl.store(out_ptr + pid, tl.min(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super(ModelNew, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.is_cuda, "Input must be on GPU"
        assert self.dim == 1, "only dim=1 supported"
        x = x.contiguous()
        B, D1, D2 = x.shape
        out = torch.empty((B, D2), device=x.device, dtype=x.dtype)
        min_reduction_kernel[(B * D2,)](x, out, B, D1, D2, BLOCK_D1=256)
        return out
