import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rms_norm_kernel(x_ptr, y_ptr, C, HW, eps, BLOCK_C: tl.constexpr, BLOCK_S: tl.constexpr):
    # flat 1-D grid over (batch, spatial block); a tile of BLOCK_C x BLOCK_S, looping over channels
    pid = tl.program_id(0)
    n_sblocks = tl.cdiv(HW, BLOCK_S)
    b = pid // n_sblocks
    sb = pid % n_sblocks
    s = sb * BLOCK_S + tl.arange(0, BLOCK_S)
    smask = s < HW
    acc = tl.zeros([BLOCK_S], dtype=tl.float32)
    for c0 in range(0, C, BLOCK_C):
        c = c0 + tl.arange(0, BLOCK_C)
        m = (c[:, None] < C) & smask[None, :]
        x = tl.load(x_ptr + b * C * HW + c[:, None] * HW + s[None, :], mask=m, other=0.0).to(tl.float32)
        acc += tl.sum(x * x, axis=0)
    rstd = 1.0 / tl.sqrt(acc / C + eps)
    for c0 in range(0, C, BLOCK_C):
        c = c0 + tl.arange(0, BLOCK_C)
        m = (c[:, None] < C) & smask[None, :]
        ptrs = b * C * HW + c[:, None] * HW + s[None, :]
        x = tl.load(x_ptr + ptrs, mask=m, other=0.0).to(tl.float32)
        tl.store(y_ptr + ptrs, x * rstd[None, :], mask=m)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super(ModelNew, self).__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.is_cuda, "Input must be on CUDA"
        x = x.contiguous()
        B, C, H, W = x.shape
        HW = H * W
        y = torch.empty_like(x)
        BLOCK_C, BLOCK_S = 16, 128
        grid = (B * triton.cdiv(HW, BLOCK_S),)
        rms_norm_kernel[grid](x, y, C, HW, self.eps, BLOCK_C=BLOCK_C, BLOCK_S=BLOCK_S)
        return y
