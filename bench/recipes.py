#!/usr/bin/env python
"""What do augmentation recipes cost? The decode-time policies against timm's PIL ops and torchvision's
tensor ops on the CPU, the batched GPU policies against a per-image loop, progressive resolution and multi-crop."""

from _lib.dispatch import run

COMMANDS = {
    "cpu": ("recipes_cpu.py", "decode-time policies against timm (PIL) and torchvision v2 (tensors), and the loader"),
    "gpu": ("recipes_gpu.py", "batched gpu_transforms policies against a per-image loop (CUDA where present)"),
    "resolution": ("recipes_resolution.py", "progressive resolution and multi-crop at decode time, one core"),
}

if __name__ == "__main__":
    run("recipes.py", __doc__, COMMANDS)
