import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def maxpool1d_kernel(x_ptr, y_ptr, L, L_out, kernel_size: tl.constexpr, stride: tl.constexpr,
                     padding: tl.constexpr, dilation: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)  # one (batch, channel) pair
    ob = tl.program_id(1)
    o = ob * BLOCK + tl.arange(0, BLOCK)
    omask = o < L_out
    acc = tl.full([BLOCK], float("-inf"), tl.float32)
    for k in tl.static_range(kernel_size):
        idx = o * stride - padding + k * dilation
        valid = omask & (idx >= 0) & (idx < L)
        v = tl.load(x_ptr + row * L + idx, mask=valid, other=float("-inf")).to(tl.float32)
        acc = tl.maximum(acc, v)
    tl.store(y_ptr + row * L_out + o, acc, mask=omask)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int = None, padding: int = 0, dilation: int = 1,
                 return_indices: bool = False):
        super().__init__()
        assert not return_indices
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        B, C, L = x.shape
        L_out = (L + 2 * self.padding - self.dilation * (self.kernel_size - 1) - 1) // self.stride + 1
        y = torch.empty((B, C, L_out), device=x.device, dtype=x.dtype)
        BLOCK = 256
        grid = (B * C, triton.cdiv(L_out, BLOCK))
        maxpool1d_kernel[grid](x, y, L, L_out, kernel_size=self.kernel_size, stride=self.stride,
                               padding=self.padding, dilation=self.dilation, BLOCK=BLOCK)
        return y
