"""The benchmark data every script makes when it is missing: an ImageNet-like folder (tools/make_imagenet_like.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def make_images(folder: Path, count: int, profile: str = "imagenet", classes: int = 100) -> None:
    """Generate ``count`` images of ``profile`` (``imagenet`` or ``photos``) in ``classes`` classes into ``folder``."""
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "make_imagenet_like.py"),
            str(folder),
            "--num-images",
            str(count),
            "--num-classes",
            str(classes),
            "--profile",
            profile,
            "--quiet",
        ],
        check=True,
    )
