import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _partial_sumsq(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(partial_ptr + pid, tl.sum(x * x, axis=0))


@triton.jit
def _normalize(x_ptr, y_ptr, partial_ptr, n, n_partial, BLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    # every program reduces the partial sums itself (they are few), then scales its block
    acc = tl.zeros([RBLOCK], dtype=tl.float32)
    for start in range(0, n_partial, RBLOCK):
        o = start + tl.arange(0, RBLOCK)
        acc += tl.load(partial_ptr + o, mask=o < n_partial, other=0.0)
    inv = 1.0 / tl.sqrt(tl.sum(acc, axis=0))
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, x * inv, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.is_cuda
        x = x.contiguous()
        n = x.numel()
        BLOCK = 4096
        nb = triton.cdiv(n, BLOCK)
        partial = torch.empty(nb, device="cuda", dtype=torch.float32)
        _partial_sumsq[(nb,)](x, partial, n, BLOCK=BLOCK, num_warps=8)
        y = torch.empty_like(x)
        _normalize[(nb,)](x, y, partial, n, nb, BLOCK=BLOCK, RBLOCK=256, num_warps=8)
        return y
