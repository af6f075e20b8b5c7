"""The "conversion" of peers that read the original files: a file list of path and label per line."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["write_file_list"]


def write_file_list(images: Sequence[str], labels: Sequence[int], out_dir: Path, sep: str) -> dict[str, Any]:
    """Write ``out_dir/file_list.txt`` (absolute path, ``sep``, label per line); the originals' bytes are counted."""
    lines = [f"{os.path.abspath(p)}{sep}{int(label)}" for p, label in zip(images, labels, strict=False)]
    (Path(out_dir) / "file_list.txt").write_text("\n".join(lines) + "\n")
    return {
        "note": "no format of its own: a file list over the original files",
        "bytes": sum(os.path.getsize(p) for p in images),
    }
