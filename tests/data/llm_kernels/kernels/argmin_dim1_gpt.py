import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def argmin_dim1_kernel(x_ptr, out_ptr, D1, D2, BLOCK_C: tl.constexpr):
    b = tl.program_id(0)
    cb = tl.program_id(1)
    cols = cb * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = cols < D2
    best = tl.full([BLOCK_C], float("inf"), dtype=tl.float32)
    best_i = tl.zeros([BLOCK_C], dtype=tl.int64)
    for i in range(0, D1):
        v = tl.load(x_ptr + b * D1 * D2 + i * D2 + cols, mask=mask, other=float("inf")).to(tl.float32)
        better = v < best  # strict: the first index wins ties, as torch.argmin
        best = tl.where(better, v, best)
        best_i = tl.where(better, i, best_i)
    tl.store(out_ptr + b * D2 + cols, best_i, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dim != 1:
            raise NotImplementedError
        x = x.contiguous()
        B, D1, D2 = x.shape
        out = torch.empty((B, D2), dtype=torch.int64, device=x.device)
        BLOCK_C = 128
        argmin_dim1_kernel[(B, triton.cdiv(D2, BLOCK_C))](x, out, D1, D2, BLOCK_C=BLOCK_C, num_warps=4)
        return out
