"""Round four: ``shuffle="index"`` at N = 0, 1, 2, primes and 2**31 + 11, and the bounded open-shard cache under a
``RLIMIT_NOFILE`` of 32-64 with DataLoader workers (in a child process: the limit is the process's)."""

from __future__ import annotations

import itertools
import json
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
import gc, hashlib, json, resource, sys
import torch
from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.loader import DataLoaderX
from fastdata.transforms import ResizeCenterCrop

def digest(workers):
    ds = ShardDataset(sys.argv[1], transform=ResizeCenterCrop(16, 16))
    order = torch.Generator().manual_seed(0)  # the same shuffled order: shards opened out of order, evicted
    loader = DataLoaderX(ds, batch_size=4, num_workers=workers, shuffle=True, generator=order)
    h = hashlib.sha256()
    for _ in range(2):  # two passes: the second pass's workers start beside the first's leftovers
        for images, labels in loader:
            h.update(images.numpy().tobytes()), h.update(labels.numpy().tobytes())
    ds.close()
    return h.hexdigest()

reference = digest(0)  # its 80 shards open under the limit this process started with
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
outcomes = {}
for config in sys.argv[2].split(","):
    limit, workers = map(int, config.split(":"))
    gc.collect()
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        outcomes[config] = "SAME" if digest(workers) == reference else "DIFFERENT"
    except Exception as exc:
        outcomes[config] = "ERROR " + str(exc).splitlines()[-1]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
print(json.dumps(outcomes))
"""


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory) -> Path:
    from tests.packs import write_tiny_shards

    return write_tiny_shards(tmp_path_factory.mktemp("eighty"), 80, fmt="lmdb")


@pytest.mark.slow
def test_low_descriptor_limits_with_workers_read_byte_identical(many_shards):
    """80 shards of one image each, read in a shuffled order by 0-4 workers under a soft ``RLIMIT_NOFILE`` of 32-64
    (in one child process, the limit set before each loader): the same batches as one process without the limit.
    Round four found: at 64 with 4 workers a worker refused its 8th shard (EMFILE) instead of closing its own least
    recently used ones. At 32 with a worker, the worker's inherited descriptors leave room for one shard or for
    none, depending on what the process holds (a fresh child had none; inside the whole suite it had): the same
    batches, or the one-line
    EMFILE that says to raise the limit or use fewer workers (``tests/formats/test_open_readers.py`` checks that
    message on its own), never a traceback or another batch."""
    root = Path(fastdata.__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    configs = ["64:4", "64:2", "48:2", "32:1", "32:0"]
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(many_shards), ",".join(configs)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    outcomes = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(outcomes) == set(configs)
    for config, outcome in outcomes.items():
        if config == "32:1" and outcome.startswith("ERROR"):
            assert "raise `ulimit -n` or use fewer DataLoader workers" in outcome, outcome
        else:
            assert outcome == "SAME", (config, outcome)
