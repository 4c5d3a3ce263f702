import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def instance_norm_kernel(x_ptr, y_ptr, HW, eps, BLOCK_SIZE: tl.constexpr):
    # One program per (batch, channel) instance; loop over the spatial elements in blocks
    pid = tl.program_id(0)
    base = pid * HW
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, HW, BLOCK_SIZE):
        offs = start + tl.arange(0, BLOCK_SIZE)
        mask = offs < HW
        acc += tl.load(x_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / HW
    acc2 = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, HW, BLOCK_SIZE):
        offs = start + tl.arange(0, BLOCK_SIZE)
        mask = offs < HW
        x = tl.load(x_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - mean, 0.0)
        acc2 += d * d
    var = tl.sum(acc2, axis=0) / HW
    rstd = 1.0 / tl.sqrt(var + eps)
    for start in range(0, HW, BLOCK_SIZE):
        offs = start + tl.arange(0, BLOCK_SIZE)
        mask = offs < HW
        x = tl.load(x_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + base + offs, (x - mean) * rstd, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_features: int):
        super(ModelNew, self).__init__()
        self.num_features = num_features
        self.eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.is_cuda, "x must be a CUDA tensor"
        x = x.contiguous()
        N, C, H, W = x.shape
        y = torch.empty_like(x)
        HW = H * W
        BLOCK_SIZE = min(triton.next_power_of_2(HW), 4096)
        instance_norm_kernel[(N * C,)](x, y, HW, self.eps, BLOCK_SIZE=BLOCK_SIZE, num_warps=8)
        return y
