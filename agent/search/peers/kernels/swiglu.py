"""swiglu candidate from kernelscout's template proposer (elementwise.j2).

knobs: {"block": 2048, "cache_hints": false, "num_warps": 4, "persistent": false, "programs_per_sm": 4, "tiling": "flat"}"""

import functools

import torch
import triton
import triton.language as tl
from torch import nn

_BLOCK = 2048


@triton.jit
def _act(v):
    return v / (1.0 + tl.exp(-v))


@triton.jit
def _kernel(A, B, Y, M, N, n_tiles, tiles_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    _tile(tl.program_id(0), A, B, Y, M, N, tiles_n, BLOCK_M, BLOCK_N)


@triton.jit
def _tile(t, A, B, Y, M, N, tiles_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Flat view: M is the element count, N and BLOCK_M are unused.
    # int64 from the start: t * BLOCK_N overflows int32 past 2^31 elements.
    offs = (tl.zeros((BLOCK_N,), tl.int64) + t) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = offs < M
    a = tl.load(A + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + offs, (_act(a) * b).to(Y.dtype.element_ty), mask=mask)


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 2


def _programs(tiles: int, device: torch.device) -> int:
    return tiles


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        a2 = a.reshape(-1).contiguous()
        b2 = b.reshape(-1).contiguous()
        m, n = a2.numel(), 1
        block_m, block_n = 1, min(_BLOCK, triton.next_power_of_2(max(m, 1)))
        tiles_n = 1
        tiles = triton.cdiv(m, block_n)
        y = torch.empty_like(a2)
        if tiles:
            _kernel[(_programs(tiles, a2.device),)](
                a2, b2, y, m, n, tiles, tiles_n, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=4,
            )
        return y.reshape(a.shape)
