import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rms_norm_kernel(x_ptr, y_ptr, C, HW, eps, BLOCK_C: tl.constexpr):
    # grid = (batch, spatial positions): each program normalises one (b, h, w) column over C
    b = tl.program_id(0)
    s = tl.program_id(1)
    c = tl.arange(0, BLOCK_C)
    mask = c < C
    offs = b * C * HW + c * HW + s
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    ms = tl.sum(x * x, axis=0) / C
    y = x / tl.sqrt(ms + eps)
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super(ModelNew, self).__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.is_cuda, "Input must be on CUDA"
        x = x.contiguous()
        B, C, H, W = x.shape
        y = torch.empty_like(x)
        BLOCK_C = triton.next_power_of_2(C)
        rms_norm_kernel[(B, H * W)](x, y, C, H * W, self.eps, BLOCK_C=BLOCK_C)
        return y
