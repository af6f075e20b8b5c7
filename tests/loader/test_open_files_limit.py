"""2,000 shards read through a full shuffle by 2 workers under ``ulimit -n 256``: every sample, whatever the bound.

Each run is a subprocess (the limit must not leak into the test process) whose timeout is the hang detector.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import google_crc32c
import pytest

from fastdata import ShardDataset
from tests.packs import write_tiny_shards

REPO = Path(__file__).resolve().parents[2]
HANG_S = 120  # far beyond what a run takes (about a second): only a hang gets here

READ_ALL = """
import json, resource, sys
import torch
root, max_open, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from fastdata import DataLoaderX, ShardDataset
from tests.storage.helpers import Crc

keywords = {} if max_open is None else {"max_open_shards": max_open}
dataset = ShardDataset(root, transform=Crc(), **keywords)
loader = DataLoaderX(dataset, batch_size=16, shuffle=True, num_workers=2, generator=torch.Generator().manual_seed(0))
seen = []
try:
    for crcs, labels in loader:  # default collate: every batch travels as shared-memory tensors
        seen += zip(crcs.tolist(), labels.tolist())
    result = {"samples": sorted(seen)}
except Exception as exc:
    result = {"type": type(exc).__name__, "is_os_error": isinstance(exc, OSError), "errno": getattr(exc, "errno", None),
              "message": str(exc), "after": len(seen)}
with open(out, "w") as f:
    json.dump(result, f)
"""


@pytest.fixture(scope="module")
def two_thousand(tmp_path_factory) -> Path:
    """2,000 TFRecord shards of one tiny JPEG each."""
    return write_tiny_shards(tmp_path_factory.mktemp("two_thousand"), 2000, fmt="tfrecord")


def read_all(root: Path, max_open: int | None, tmp_path: Path) -> dict:
    out = tmp_path / "result.json"
    try:
        done = subprocess.run(
            [sys.executable, "-c", READ_ALL, str(root), json.dumps(max_open), str(out)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the loader hung (killed after {HANG_S} s); its stderr ended with:\n{(exc.stderr or b'')[-3000:]}")
    assert done.returncode == 0 and out.is_file(), done.stderr[-3000:]
    return json.loads(out.read_text())


def test_a_full_shuffle_over_2000_shards_under_ulimit_256_reads_every_sample(two_thousand, tmp_path):
    reference = ShardDataset(two_thousand)
    expected = sorted((google_crc32c.value(data), label) for data, label in map(reference.read, range(len(reference))))
    result = read_all(two_thousand, None, tmp_path)  # the default bound: a quarter of 256
    assert "samples" in result, result
    assert [tuple(s) for s in result["samples"]] == expected


def test_with_the_bound_above_the_limit_the_loader_still_reads_every_sample(two_thousand, tmp_path):
    # max_open_shards=10,000 cannot be held under 256 descriptors: near the limit each worker closes its own least
    # recently used shards instead of failing (an EMFILE only when it holds none to close: tests/formats)
    reference = ShardDataset(two_thousand)
    expected = sorted((google_crc32c.value(data), label) for data, label in map(reference.read, range(len(reference))))
    result = read_all(two_thousand, 10_000, tmp_path)
    assert "samples" in result, result
    assert [tuple(s) for s in result["samples"]] == expected
