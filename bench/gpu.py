#!/usr/bin/env python
"""What does the GPU side cost? The prefetcher's hidden host-to-device copy, the batched augmentation policies, and
the DALI backend's GPU decode. Each command needs a CUDA device and says so in one line without one
(tools/gpu_check.sh runs them all with the CUDA tests)."""

from _lib.dispatch import run

COMMANDS = {
    "prefetcher": ("gpu_prefetcher.py", "a training-like loop with and without DataPrefetcher: the copy it hides"),
    "policies": ("recipes_gpu.py", "batched gpu_transforms policies against a per-image loop, CPU and CUDA"),
    "dali": ("gpu_dali.py", "the DALI backend over a TFRecord pack: GPU (nvJPEG) against CPU decode"),
}

if __name__ == "__main__":
    run("gpu.py", __doc__, COMMANDS)
