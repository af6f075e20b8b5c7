"""Round four: ``shuffle="index"`` at N = 0, 1, 2, primes and 2**31 + 11, and the bounded open-shard cache under a
``RLIMIT_NOFILE`` of 32-64 with DataLoader workers (in a child process: the limit is the process's)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fastdata
from fastdata.sampler.distributed import DistributedSampler
from fastdata.sampler.index_shuffle import IndexOrder


class Sized:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 7, 13, 31, 97, 8191, 65537])
@pytest.mark.parametrize("mode", ["index", "index-blocks"])
@pytest.mark.parametrize("world, repeats", [(1, 1), (3, 1), (2, 3)])
def test_index_shuffle_is_a_permutation_at_small_and_prime_n(n, mode, world, repeats):
    got: list[int] = []
    for rank in range(world):
        sampler = DistributedSampler(
            Sized(n),
            num_replicas=world,
            rank=rank,
            shuffle=mode,
            seed=5,
            repeats=repeats,
            shard_sizes=[n // 2, n - n // 2] if mode == "index-blocks" else None,
        )
        order = list(sampler)
        assert len(order) == len(sampler) and all(type(i) is int for i in order)
        got += order
    if n == 0:
        assert got == []
        return
    counts = np.bincount(got, minlength=n)
    assert len(counts) == n  # every index in [0, n)
    if world == 1 and repeats == 1:
        assert sorted(got) == list(range(n))  # a bijection
    elif repeats == 1:  # padded to a multiple of the ranks: every sample at least once
        assert counts.min() >= 1 and counts.sum() == -(-n // world) * world
    else:  # repeated augmentation: a pass of n reads, each sample read `repeats` times in a row (a few cut short)
        assert counts.sum() == -(-n // world) * world and counts.max() <= repeats + 1


def test_index_shuffle_at_two_to_the_31_plus_11_has_no_overflow():
    """Sampled: the first 100,000 of a pass, both ends of the position range and 100,000 random positions give
    distinct values (distinct positions) in [0, N), as int64."""
    n = 2**31 + 11
    sampler = DistributedSampler(Sized(n), num_replicas=1, rank=0, shuffle="index", seed=1)
    assert len(sampler) == n
    first = np.array(list(itertools.islice(iter(sampler), 100_000)))
    assert len(np.unique(first)) == 100_000 and first.min() >= 0 and first.max() < n
    order = IndexOrder(n, 1, 0)
    positions = np.unique(
        np.concatenate([np.arange(1000), n - 1 - np.arange(1000), np.random.default_rng(0).integers(0, n, 100_000)])
    )
    values = order.at(positions)
    assert values.dtype == np.int64 and values.min() >= 0 and values.max() < n
    assert len(np.unique(values)) == len(positions)
    assert np.array_equal(order.at(positions[:2000]), values[:2000])  # the same pass, the same values


CHILD = """
import hashlib, resource, sys
limit, workers = int(sys.argv[2]), int(sys.argv[3])
import torch
from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.loader import DataLoaderX

def digest(loader):
    h = hashlib.sha256()
    for _ in range(2):  # two passes: the second pass's workers start beside the first's leftovers
        for images, labels in loader:
            h.update(images.numpy().tobytes()), h.update(labels.numpy().tobytes())
    return h.hexdigest()

from fastdata.transforms import ResizeCenterCrop
ds = ShardDataset(sys.argv[1], transform=ResizeCenterCrop(16, 16))
first = torch.Generator().manual_seed(0)
reference = digest(DataLoaderX(ds, batch_size=4, num_workers=0, shuffle=True, generator=first))
ds._readers.close()  # its 80 shards were open under the limit it started with
del ds
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
try:
    again = ShardDataset(sys.argv[1], transform=ResizeCenterCrop(16, 16))
    order = torch.Generator().manual_seed(0)  # the same shuffled order: shards opened out of order, evicted
    got = digest(DataLoaderX(again, batch_size=4, num_workers=workers, shuffle=True, generator=order))
except Exception as exc:
    message = str(exc).splitlines()[-1]
    print("ERROR", message)
    sys.exit(3)
print("SAME" if got == reference else "DIFFERENT")
"""


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory) -> Path:
    from tests.packs import write_tiny_shards

    return write_tiny_shards(tmp_path_factory.mktemp("eighty"), 80, fmt="lmdb")


@pytest.mark.slow
@pytest.mark.parametrize(
    "limit, workers, expected",
    [(64, 4, "SAME"), (64, 2, "SAME"), (48, 2, "SAME"), (32, 1, "ERROR"), (32, 0, "SAME")],
)
def test_low_descriptor_limits_with_workers_read_byte_identical(many_shards, limit, workers, expected):
    """80 shards of one image each, read in order by ``workers`` workers under a soft ``RLIMIT_NOFILE`` of ``limit``:
    the same batches as one process without the limit. Round four found: at 64 with 4 workers a worker refused
    its 8th shard (EMFILE) instead of closing its own least recently used ones. At 32 a worker's inherited pipes
    leave no room for one shard: the one-line EMFILE says to raise the limit or use fewer workers."""
    root = Path(fastdata.__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(many_shards), str(limit), str(workers)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    out = proc.stdout.strip()
    if expected == "SAME":
        assert out == "SAME", (out, proc.stderr[-2000:])
    else:  # a worker's own files leave no room for a shard: one line that says what to change
        assert out.startswith("ERROR") and "raise `ulimit -n` or use fewer DataLoader workers" in out, out
