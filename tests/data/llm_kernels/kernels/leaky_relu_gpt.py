import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def leaky_relu_kernel(x_ptr, y_ptr, n, slope, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    y = tl.where(x >= 0, x, x * slope)
    tl.store(y_ptr + offs, y, mask=m)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = float(negative_slope)
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        self.num_sms = props.multi_processor_count

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_cuda:
            raise RuntimeError("ModelNew expects a CUDA tensor")
        x_c = x.contiguous()
        y = torch.empty_like(x_c)
        n = x_c.numel()
        BLOCK = 2048 if n >= self.num_sms * 2048 else 512
        leaky_relu_kernel[(triton.cdiv(n, BLOCK),)](x_c, y, n, self.negative_slope, BLOCK=BLOCK, num_warps=4)
        return y.view_as(x)
