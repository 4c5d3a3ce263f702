import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _inorm_fwd(X, Y, HW, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < HW
    x = tl.load(X + row * HW + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / BLOCK
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / BLOCK
    y = xc / tl.sqrt(var + eps)
    tl.store(Y + row * HW + cols, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        x = x.contiguous()
        y = torch.empty_like(x)
        hw = h * w
        block = triton.next_power_of_2(hw)
        _inorm_fwd[(n * c,)](x, y, hw, self.eps, BLOCK=block)
        return y
