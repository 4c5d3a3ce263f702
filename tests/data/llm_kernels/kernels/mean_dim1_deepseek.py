import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mean_dim1_kernel(x_ptr, out_ptr, D1, D2, BLOCK_D2: tl.constexpr):
    # x: (B, D1, D2); out: (B, D2). Program (b, j-block) sums over D1.
    b = tl.program_id(0)
    jb = tl.program_id(1)
    cols = jb * BLOCK_D2 + tl.arange(0, BLOCK_D2)
    mask = cols < D2
    acc = tl.zeros([BLOCK_D2], dtype=tl.float32)
    for i in range(0, D1):
        acc += tl.load(x_ptr + b * D1 * D2 + i * D2 + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + b * D2 + cols, acc / D1, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super(ModelNew, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.is_cuda and self.dim == 1
        x = x.contiguous()
        B, D1, D2 = x.shape
        out = torch.empty((B, D2), device=x.device, dtype=x.dtype)
        BLOCK_D2 = 256
        grid = (B, triton.cdiv(D2, BLOCK_D2))
        mean_dim1_kernel[grid](x, out, D1, D2, BLOCK_D2=BLOCK_D2)
        return out
