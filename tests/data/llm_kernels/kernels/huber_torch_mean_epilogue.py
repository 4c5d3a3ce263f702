import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def smooth_l1_kernel(pred_ptr, tgt_ptr, loss_ptr, n, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    p = tl.load(pred_ptr + offs, mask=mask, other=0.0)
    t = tl.load(tgt_ptr + offs, mask=mask, other=0.0)
    d = tl.abs(p - t)
    loss = tl.where(d < 1.0, 0.5 * d * d, d - 0.5)
    tl.store(loss_ptr + offs, loss, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, predictions, targets):
        assert predictions.is_cuda and targets.is_cuda
        p = predictions.contiguous()
        t = targets.contiguous()
        n = p.numel()
        loss = torch.empty(n, device=p.device, dtype=torch.float32)
        smooth_l1_kernel[(triton.cdiv(n, 1024),)](p, t, loss, n, BLOCK_SIZE=1024)
        return loss.sum() / n
