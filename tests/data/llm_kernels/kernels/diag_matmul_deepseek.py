import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def diag_mul_kernel(a_ptr, b_ptr, c_ptr, N, M, BLOCK_M: tl.constexpr):
    # C[i, j] = A[i] * B[i, j]: row i scaled by the diagonal entry A[i]
    row = tl.program_id(0)
    cb = tl.program_id(1)
    cols = cb * BLOCK_M + tl.arange(0, BLOCK_M)
    mask = cols < M
    a = tl.load(a_ptr + row)
    b = tl.load(b_ptr + row * M + cols, mask=mask)
    tl.store(c_ptr + row * M + cols, a * b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, A, B):
        assert A.is_cuda and B.is_cuda
        A = A.contiguous()
        B = B.contiguous()
        N, M = B.shape
        C = torch.empty((N, M), device=B.device, dtype=B.dtype)
        BLOCK_M = 1024
        diag_mul_kernel[(N, triton.cdiv(M, BLOCK_M))](A, B, C, N, M, BLOCK_M=BLOCK_M)
        return C
