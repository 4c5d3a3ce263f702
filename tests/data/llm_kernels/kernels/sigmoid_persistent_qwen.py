import torch
import torch.nn as nn
import triton
import triton.language as tl

NUM_SMS = torch.cuda.get_device_properties("cuda").multi_processor_count


@triton.jit
def sigmoid_persistent(x_ptr, y_ptr, n_elements, num_tiles, BLOCK_SIZE: tl.constexpr, NUM_PROGRAMS: tl.constexpr):
    pid = tl.program_id(0)
    for tile in range(pid, num_tiles, NUM_PROGRAMS):
        offsets = tile * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n_elements
        x = tl.load(x_ptr + offsets, mask=mask)
        tl.store(y_ptr + offsets, tl.sigmoid(x), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.device.type == "cuda"
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        BLOCK_SIZE = 1024
        num_tiles = triton.cdiv(n, BLOCK_SIZE)
        programs = max(1, min(NUM_SMS * 4, num_tiles))
        sigmoid_persistent[(programs,)](x, y, n, num_tiles, BLOCK_SIZE=BLOCK_SIZE, NUM_PROGRAMS=programs)
        return y
