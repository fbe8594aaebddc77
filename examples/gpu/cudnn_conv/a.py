"""A two-convolution stack on CUDA with cuDNN disabled at import time.

Pair: b.py leaves torch.backends.cudnn.enabled = True. The CUDA counterpart of
examples/cases/mkldnn_conv (oneDNN on the CPU).
Expected diagnosis: a native divergence at aten::_convolution (PyTorch's own slow conv2d,
im2col and a GEMM per image, instead of cudnn_convolution); key variable
torch.backends.cudnn.enabled; origin the flag line below.

CUDA only, so not under examples/cases: `magneton eval examples/cases` and
benchmarks/diagnosis_time.py run every case there on machines without a GPU, where this
pair cannot run (and with no cuDNN to switch off, would have nothing to find).
benchmarks/gpu_check.py records it with the NVML sensor.
"""

import torch
from torch import nn

torch.backends.cudnn.enabled = False
# full fp32 on both sides: cuDNN convolutions may use TF32 by default and the slow path's
# GEMMs may not, and outputs that differ by TF32 rounding would not match by value
torch.backends.cudnn.allow_tf32 = False


def setup():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1),
    ).eval()
    # 32 images: a few milliseconds of GPU work per call (8 took 0.4-0.6 ms on an H100)
    x = torch.randn(32, 32, 64, 64)
    model = model.to("cuda")
    x = x.to("cuda")
    return model, x


def main(model, x):
    with torch.no_grad():
        return model(x)
