import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sumsq_kernel(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(partial_ptr + pid, tl.sum(x * x, axis=0))


@triton.jit
def reduce_kernel(partial_ptr, out_ptr, m, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, m, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(partial_ptr + offs, mask=offs < m, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0))


@triton.jit
def scale_kernel(x_ptr, y_ptr, norm_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    norm = tl.load(norm_ptr)
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x / norm, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        n = x.numel()
        BLOCK = 1024
        blocks = triton.cdiv(n, BLOCK)
        partial = torch.empty(blocks, device=x.device, dtype=torch.float32)
        sumsq_kernel[(blocks,)](x, partial, n, BLOCK=BLOCK)
        total = torch.empty(1, device=x.device, dtype=torch.float32)
        reduce_kernel[(1,)](partial, total, blocks, BLOCK=1024)
        norm = torch.sqrt(total)  # tiny epilogue: one scalar
        y = torch.empty_like(x)
        scale_kernel[(blocks,)](x, y, norm, n, BLOCK=BLOCK)
        return y
