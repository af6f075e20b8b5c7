#!/usr/bin/env python
"""How fast does each loader feed a training loop? fastdata against torch + PIL, torch + OpenCV, DALI and the
peers (FFCV, SPDL, Streaming, litdata, WebDataset), side by side on the same images; and where fastdata's time goes."""

from _lib.dispatch import run

COMMANDS = {
    "throughput": ("throughput.py", "the side-by-side comparison (fastdata bench), JSON + chart: the main table"),
    "headline": ("headline.py", "the docs' headline in one command: the loader at its kernel's bound, ~15 minutes"),
    "threads": ("threads.py", "threads in one process against worker processes: images/s and summed PSS"),
}

if __name__ == "__main__":
    run("loaders.py", __doc__, COMMANDS)
