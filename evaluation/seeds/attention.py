"""Seed kernel for the attention problem: the attention template (agent/proposers/templates/attention.j2)
at its default knobs. One program per (64-query tile, batch-head), the longest tiles first, walks the key
tiles up to its diagonal: those wholly inside the sequence and below the diagonal without masks, the
rest with them, keeping a running max and sum of exp per query row (base 2) and rescaling its fp32
accumulator, so the (L, L) score matrix never goes to memory. Float32 products at IEEE precision.
"""

import math
import os

import torch
import triton
import triton.language as tl
from torch import nn

_BLOCK_M = 64
_BLOCK_N = 64
_STAGES = 2
_TILE_BYTES = 32768  # one query, key or value tile at most: a 16-row tile of a 1024-wide fp32 head is 64 KB
_SMEM_BYTES = 160 * 1024  # what the pipelined key and value tiles and the query tile may take
_LOG2E = 1.4426950408889634
# The interpreter computes bf16 dots wrongly: there, low-precision operands are widened to fp32 first.
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _attend(
    acc,
    l_i,
    m_i,
    q,
    K,
    V,
    S,
    E,
    EV,
    qk_scale,
    bh,
    start,
    rm,
    re,
    rev,
    skb,
    skn,
    ske,
    svb,
    svn,
    sve,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    MASKED: tl.constexpr,
    EVEN_E: tl.constexpr,
    FP32: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """One key tile into the online softmax. MASKED: the tile may hold keys past S or, under CAUSAL, past
    a query's own position; the others (below the diagonal, inside S) skip both masks."""
    rn = start + tl.arange(0, BLOCK_N)
    # the key tile [BLOCK_E, BLOCK_N], transposed through its pointers
    k_ptr = K + bh * skb + rn[None, :] * skn + re[:, None] * ske
    v_ptr = V + bh * svb + rn[:, None] * svn + rev[None, :] * sve
    if MASKED:
        kt = tl.load(k_ptr, mask=(rn < S)[None, :] & (re < E)[:, None], other=0.0)
        v = tl.load(v_ptr, mask=(rn < S)[:, None] & (rev < EV)[None, :], other=0.0)
    elif EVEN_E:
        kt = tl.load(k_ptr)
        v = tl.load(v_ptr)
    else:
        kt = tl.load(k_ptr, mask=(re < E)[:, None], other=0.0)
        v = tl.load(v_ptr, mask=(rev < EV)[None, :], other=0.0)
    if UPCAST:
        kt = kt.to(tl.float32)
        v = v.to(tl.float32)
    if FP32:
        s = tl.dot(q, kt, input_precision="ieee")
    else:
        s = tl.dot(q, kt, input_precision="ieee")
    if MASKED:
        valid = (rn < S)[None, :]
        if CAUSAL:
            valid = valid & (rn[None, :] <= rm[:, None])
        s = tl.where(valid, s, float("-inf"))
    # every row sees key 0 in the first tile (causal or not), so m_new is finite from the first tile on.
    # The running max stays in raw score units and is subtracted before the scale (qk_scale = scale *
    # log2(e), the softmax in base 2): s - m is exactly <= 0, so p <= 1. Scaling first lets the compiler
    # fuse s * qk_scale - m into one fma whose unrounded product can exceed the rounded max by half an
    # ulp, 128 at scores near 2**31 (inputs near 1e4), and exp2(128) is inf in float32.
    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.exp2((s - m_new[:, None]) * qk_scale)
    alpha = tl.exp2((m_i - m_new) * qk_scale)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    if FP32:
        acc = tl.dot(p, v, acc, input_precision="ieee")
    else:
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision="ieee")
    return acc, l_i, m_new


@triton.jit
def _attention(
    Q,
    K,
    V,
    Out,
    L,
    S,
    E,
    EV,
    n_m,
    qk_scale,
    sqb,
    sqm,
    sqe,
    skb,
    skn,
    ske,
    svb,
    svn,
    sve,
    sob,
    som,
    soe,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_EV: tl.constexpr,
    CAUSAL: tl.constexpr,
    EVEN_E: tl.constexpr,
    FP32: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid = tl.program_id(0)
    pid_m = pid % n_m
    if CAUSAL:  # the longest query tiles (the most keys) first, so the short ones fill the tail
        pid_m = n_m - 1 - pid_m
    bh = (pid // n_m).to(tl.int64)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    re = tl.arange(0, BLOCK_E)
    rev = tl.arange(0, BLOCK_EV)
    q = tl.load(
        Q + bh * sqb + rm[:, None] * sqm + re[None, :] * sqe, mask=(rm < L)[:, None] & (re < E)[None, :], other=0.0
    )
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_EV], tl.float32)
    hi = S
    if CAUSAL:  # key j is seen by query i when j <= i (torch's is_causal: the top-left lower triangle)
        hi = tl.minimum(S, (pid_m + 1) * BLOCK_M)
        full = (tl.minimum(S, pid_m * BLOCK_M) // BLOCK_N) * BLOCK_N  # tiles wholly below the diagonal
    else:
        full = (S // BLOCK_N) * BLOCK_N
    for start in range(0, full, BLOCK_N):
        acc, l_i, m_i = _attend(
            acc,
            l_i,
            m_i,
            q,
            K,
            V,
            S,
            E,
            EV,
            qk_scale,
            bh,
            start,
            rm,
            re,
            rev,
            skb,
            skn,
            ske,
            svb,
            svn,
            sve,
            BLOCK_N,
            CAUSAL,
            False,
            EVEN_E,
            FP32,
            UPCAST,
        )
    for start in range(full, hi, BLOCK_N):
        acc, l_i, m_i = _attend(
            acc,
            l_i,
            m_i,
            q,
            K,
            V,
            S,
            E,
            EV,
            qk_scale,
            bh,
            start,
            rm,
            re,
            rev,
            skb,
            skn,
            ske,
            svb,
            svn,
            sve,
            BLOCK_N,
            CAUSAL,
            True,
            EVEN_E,
            FP32,
            UPCAST,
        )
    out = acc / l_i[:, None]
    tl.store(
        Out + bh * sob + rm[:, None] * som + rev[None, :] * soe,
        out.to(Out.dtype.element_ty),
        mask=(rm < L)[:, None] & (rev < EV)[None, :],
    )


def _tile(rows: int, row_bytes: int, longest: int) -> int:
    """The knob's tile, capped by `_TILE_BYTES` of rows of `row_bytes` and by the sequence's length."""
    cap = max(16, _TILE_BYTES // row_bytes)
    return max(16, min(rows, cap, triton.next_power_of_2(max(longest, 1))))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        q, k, v = q, k, v
        *batch, L, E = q.shape
        S, EV = k.shape[-2], v.shape[-1]
        batch = torch.broadcast_shapes(tuple(batch), tuple(k.shape[:-2]), tuple(v.shape[:-2]))
        nb = math.prod(batch)
        q3 = q.expand(*batch, L, E).reshape(nb, L, E)
        k3 = k.expand(*batch, S, E).reshape(nb, S, E)
        v3 = v.expand(*batch, S, EV).reshape(nb, S, EV)
        if S == 0:  # softmax over no keys, then a product over no keys: torch gives zeros
            return torch.zeros(*batch, L, EV, device=q.device, dtype=q.dtype)
        o = torch.empty(nb, L, EV, device=q.device, dtype=q.dtype)
        if o.numel() == 0:
            return o.reshape(*batch, L, EV)
        scale = None
        if scale is None:
            scale = 1.0 / math.sqrt(E)
        block_e = max(16, triton.next_power_of_2(E))
        block_ev = max(16, triton.next_power_of_2(EV))
        upcast = _INTERPRETED and q.dtype != torch.float32
        item = 4 if upcast else q.element_size()
        row_bytes = max(block_e, block_ev) * item
        block_m = _tile(_BLOCK_M, row_bytes, L)
        block_n = _tile(_BLOCK_N, row_bytes, S)
        # as many stages of key and value tiles as fit beside the query tile (a wide fp32 head takes one)
        stage_bytes = block_n * (block_e + block_ev) * item
        stages = max(1, min(_STAGES, (_SMEM_BYTES - block_m * block_e * item) // stage_bytes))
        n_m = triton.cdiv(L, block_m)
        _attention[(n_m * nb,)](
            q3,
            k3,
            v3,
            o,
            L,
            S,
            E,
            EV,
            n_m,
            scale * _LOG2E,
            q3.stride(0),
            q3.stride(1),
            q3.stride(2),
            k3.stride(0),
            k3.stride(1),
            k3.stride(2),
            v3.stride(0),
            v3.stride(1),
            v3.stride(2),
            o.stride(0),
            o.stride(1),
            o.stride(2),
            BLOCK_M=block_m,
            BLOCK_N=block_n,
            BLOCK_E=block_e,
            BLOCK_EV=block_ev,
            CAUSAL=True,
            EVEN_E=E == block_e and EV == block_ev,
            FP32=q.dtype == torch.float32 or upcast,
            UPCAST=upcast,
            num_warps=4,
            num_stages=stages,
        )
        return o.reshape(*batch, L, EV)
