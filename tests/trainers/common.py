"""What the trainer tests share: a tiny pack, a tiny model, and a digest of each batch's pixels and labels."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
EPOCHS = 2
CROP = 16


def make_pack(root: Path) -> Path:
    """24 distinct small JPEGs in 2 classes, packed as TFRecord shards of 5 (several shards)."""
    from tests.packs import make_distinct_folder, pack_quietly

    make_distinct_folder(root / "src", per_class=12)
    pack_quietly(root / "src", root / "pack", "tfrecord")
    return root / "pack"


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * CROP * CROP, 2))


def digest(images: torch.Tensor, labels: torch.Tensor) -> str:
    """The batch's pixels and labels, as one short hex digest."""
    h = hashlib.sha256(images.detach().cpu().contiguous().numpy().tobytes())
    h.update(labels.detach().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def write_seen(out: Path, name: str, rank: int, seen: list[str]) -> None:
    (out / f"{name}-rank{rank}.json").write_text(json.dumps(seen))


def read_seen(out: Path, name: str, rank: int) -> list[str]:
    return json.loads((out / f"{name}-rank{rank}.json").read_text())


def run(argv: list[str], timeout: int = 300) -> None:
    """Run a trainer script in a fresh process (this checkout first on the path); fail with its output."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    done = subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
