"""Seed kernel for the matmul_epilogue problem: a classic tiled tl.dot with bias + tanh-gelu fused.

Tiles are upcast to fp32 before tl.dot: bf16 dot gives garbage under the Triton interpreter, and
bf16 values are exact in TF32, so on a GPU this costs speed (TF32 instead of bf16 tensor cores), not
accuracy. gelu_tanh(z) = z / (1 + exp(-2u)) with u = sqrt(2/pi) (z + 0.044715 z^3), since
0.5 * (1 + tanh(u)) = sigmoid(2u) and tl has no portable tanh.
"""

import math

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _matmul_gelu_fwd(
    X,
    W,
    B,
    Y,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_ym,
    stride_yn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    x_ptrs = X + rm[:, None] * stride_xm + rk[None, :] * stride_xk
    # weight is (N, K): read it as the (K, N) operand through its strides, no transpose copy.
    w_ptrs = W + rk[:, None] * stride_wk + rn[None, :] * stride_wn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = k0 + rk < K
        a = tl.load(x_ptrs, mask=(rm[:, None] < M) & k_ok[None, :], other=0.0).to(tl.float32)
        b = tl.load(w_ptrs, mask=k_ok[:, None] & (rn[None, :] < N), other=0.0).to(tl.float32)
        acc += tl.dot(a, b)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    bias = tl.load(B + rn, mask=rn < N, other=0.0).to(tl.float32)
    z = acc + bias[None, :]
    u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
    y = z / (1.0 + tl.exp(-2.0 * u))
    y_ptrs = Y + rm[:, None] * stride_ym + rn[None, :] * stride_yn
    tl.store(y_ptrs, y.to(Y.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    # Tile sizes; an instance may lower them (tests do, to get many tiles at tiny sizes).
    block_m = 128
    block_n = 128
    block_k = 32

    def __init__(self, k: int, n: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, k) / math.sqrt(k))
        self.bias = nn.Parameter(0.1 * torch.randn(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = x.shape[-1]
        x2 = x.reshape(-1, k).contiguous()
        m, n = x2.shape[0], self.weight.shape[0]
        y = torch.empty((m, n), dtype=x.dtype, device=x.device)
        grid = (triton.cdiv(m, self.block_m), triton.cdiv(n, self.block_n))
        _matmul_gelu_fwd[grid](
            x2,
            self.weight,
            self.bias,
            y,
            m,
            n,
            k,
            x2.stride(0),
            x2.stride(1),
            self.weight.stride(0),
            self.weight.stride(1),
            y.stride(0),
            y.stride(1),
            BLOCK_M=self.block_m,
            BLOCK_N=self.block_n,
            BLOCK_K=self.block_k,
            num_warps=8,
            num_stages=3,
        )
        return y.reshape(*x.shape[:-1], n)
