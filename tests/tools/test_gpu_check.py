"""tools/gpu_check.sh on a machine without CUDA: one line that says so, exit 0 (with CUDA it runs everything)."""

import subprocess
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device: gpu_check.sh runs for real")
def test_without_cuda_it_says_so_in_one_line():
    done = subprocess.run(["bash", "tools/gpu_check.sh"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    assert done.stdout.strip().count("\n") == 0 and "no CUDA device" in done.stdout


def test_it_selects_every_cuda_test_by_one_marker():
    """No test skips on a missing CUDA device by its own skipif: ``-m cuda`` must find them all."""
    offenders = [
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "tests").rglob("test_*.py")
        if p.name != Path(__file__).name and "skipif(not torch.cuda.is_available()" in p.read_text()
    ]
    assert offenders == []
