"""Seed kernel for the geglu problem: a flat elementwise kernel, tanh-gelu computed in fp32.

tl has no portable tanh (libdevice is absent under the interpreter), and
0.5 * (1 + tanh(u)) = sigmoid(2u), so gelu_tanh(a) = a / (1 + exp(-2u)): one exp, no cancellation,
and the right limits when exp overflows.
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _geglu_fwd(A, B, Y, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    a = tl.load(A + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + offs, mask=mask, other=0.0).to(tl.float32)
    u = 0.7978845608028654 * (a + 0.044715 * a * a * a)  # sqrt(2 / pi) * (a + 0.044715 a^3)
    y = a / (1.0 + tl.exp(-2.0 * u)) * b
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    block = 1024

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a1 = a.reshape(-1).contiguous()
        b1 = b.reshape(-1).contiguous()
        y = torch.empty_like(a1)
        n = a1.numel()
        _geglu_fwd[(triton.cdiv(n, self.block),)](a1, b1, y, n, BLOCK=self.block, num_warps=4)
        return y.reshape(a.shape)
