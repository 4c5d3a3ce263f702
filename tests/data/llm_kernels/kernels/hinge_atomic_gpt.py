import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def hinge_loss_kernel(pred_ptr, tgt_ptr, out_ptr, n_rows, n_cols, inv_total, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < n_rows
    cmask = cols < n_cols
    mask = rmask[:, None] & cmask[None, :]
    p = tl.load(pred_ptr + rows[:, None] * n_cols + cols[None, :], mask=mask, other=0.0)
    # predictions * targets broadcasts targets along the last dimension, as in the reference
    t = tl.load(tgt_ptr + cols, mask=cmask, other=0.0)
    h = tl.maximum(1.0 - p * t[None, :], 0.0)
    h = tl.where(mask, h, 0.0)
    tl.atomic_add(out_ptr, tl.sum(tl.sum(h, axis=1), axis=0) * inv_total)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        assert predictions.is_cuda and targets.is_cuda, "CUDA tensors required"
        predictions = predictions.contiguous()
        targets = targets.contiguous()
        n_rows, n_cols = predictions.shape
        out = torch.zeros(1, device="cuda", dtype=torch.float32)
        BLOCK_M, BLOCK_N = 32, 128
        grid = (triton.cdiv(n_rows, BLOCK_M), triton.cdiv(n_cols, BLOCK_N))
        hinge_loss_kernel[grid](predictions, targets, out, n_rows, n_cols, 1.0 / predictions.numel(),
                                BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
        return out[0]
