#!/usr/bin/env python
"""How fast is the decode kernel alone? One core, the same bytes and crops, against full decodes and the
fallbacks; the per-sample path, PNGs, the cost of the record checks, and the kernel's design probes."""

from _lib.dispatch import run

COMMANDS = {
    "crop": ("kernel_crop.py", "crop-region decode against full decodes (cv2, PIL, TurboJPEG), one core"),
    "per-sample": ("kernel_per_sample.py", "the per-sample path against the batch path, one core"),
    "png": ("kernel_png.py", "PNG decode, Pillow against OpenCV"),
    "read-checks": ("kernel_read_checks.py", "what the record checks (CRCs, bounds) cost on the read path"),
    "read-share": (
        "kernel_read_share.py",
        "the record reads' share of a batch: plain Python against the records kernel",
    ),
    "intervals": ("kernel_intervals.py", "design probe: crops from restart intervals against region decode"),
    "scales": ("kernel_scales.py", "design probe: DCT scales M/8 against powers of two"),
    "resample": ("kernel_resample.py", "the crop resample against torchvision's (pixels, sharpness) and its cost"),
}

if __name__ == "__main__":
    run("kernel.py", __doc__, COMMANDS)
