import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scalar_mul_kernel(a_ptr, c_ptr, s, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    a = tl.load(a_ptr + offsets, mask=mask)
    tl.store(c_ptr + offsets, a * s, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, A: torch.Tensor, s: float) -> torch.Tensor:
        A = A.cuda().contiguous()
        C = torch.empty(A.shape, dtype=A.dtype, device=torch.device('cuda'))
        n = A.numel()
        scalar_mul_kernel[(triton.cdiv(n, 1024),)](A, C, s, n, BLOCK_SIZE=1024)
        return C
