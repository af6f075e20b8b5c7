"""Two ranks with torch.distributed (gloo, CPU) reading a pack through DataLoaderX + DistributedSampler(ratio=3)."""

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

RATIO = 3
WORLD = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, root: str, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        from fastdata import DataLoaderX, DistributedSampler, ShardDataset, fast_collate
        from fastdata.transforms import RandomResizedCrop

        dataset = ShardDataset(root, transform=RandomResizedCrop(8))
        sampler = DistributedSampler(dataset, shuffle=True, seed=1, ratio=RATIO)  # rank and world from the group
        assert (sampler.rank, sampler.num_replicas) == (rank, WORLD)
        loader = DataLoaderX(dataset, batch_size=3, sampler=sampler, num_workers=1, collate_fn=fast_collate)
        seen = []
        for images, labels in loader:
            assert images.dtype == torch.uint8 and images.shape[1:] == (3, 8, 8)
            seen.extend(labels.tolist())
        gathered = [None] * WORLD
        dist.all_gather_object(gathered, {"labels": seen, "per_pass": sampler.num_samples})
        if rank == 0:
            torch.save(gathered, out)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def one_image_per_class(tmp_path_factory):
    """12 classes of one image each: a sample's label identifies it."""
    from tests.images import pack_one_image_per_class

    return pack_one_image_per_class(tmp_path_factory, 12, samples_per_shard=5, shape=lambda k: (10 + k, 12))


@pytest.mark.slow
def test_two_ranks_disjoint_per_pass_and_cover(one_image_per_class, tmp_path):
    root = one_image_per_class
    out = tmp_path / "gathered.pt"
    mp.start_processes(_rank_main, args=(str(root), free_port(), str(out)), nprocs=WORLD, start_method="spawn")
    gathered = torch.load(out)
    per_pass = gathered[0]["per_pass"]
    assert per_pass == 12 // WORLD
    passes = []
    for p in range(RATIO):
        chunks = [r["labels"][p * per_pass : (p + 1) * per_pass] for r in gathered]
        assert all(len(c) == len(set(c)) == per_pass for c in chunks)
        assert not set(chunks[0]) & set(chunks[1])  # ranks disjoint within the pass
        assert set(chunks[0]) | set(chunks[1]) == set(range(12))  # and together they cover the dataset
        passes.append(chunks[0] + chunks[1])
    assert len({tuple(p) for p in passes}) == RATIO  # each pass is a fresh shuffle
