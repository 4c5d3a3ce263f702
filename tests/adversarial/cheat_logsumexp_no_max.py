"""log_softmax as x - log(sum(exp(x))), the logsumexp without its max subtraction: the large-logits
stress trial overflows the sum, and every output becomes -inf or NaN."""
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _log_softmax(X, Y, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(X + row * N + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
    lse = tl.log(tl.sum(tl.exp(x), axis=0))
    tl.store(Y + row * N + cols, (x - lse).to(Y.dtype.element_ty), mask=cols < N)


class ModelNew(nn.Module):
    def forward(self, x):
        n = x.shape[-1]
        x2 = x.reshape(-1, n).contiguous()
        y = torch.empty_like(x2)
        _log_softmax[(x2.shape[0],)](x2, y, n, BLOCK_N=triton.next_power_of_2(n))
        return y.reshape(x.shape)
