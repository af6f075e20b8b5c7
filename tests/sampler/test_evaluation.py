"""Exact distributed evaluation: EvalSampler gives each sample to one rank, gather_in_order restores dataset order."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fastdata.sampler import EvalSampler, gather_in_order
from fastdata.sampler.evaluation import interleave

N = 101  # no rank count of the tests divides it (1 does, trivially)


def _metric_inputs(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 10, (n,), generator=g), torch.randint(0, 10, (n,), generator=g)


@pytest.mark.parametrize("world", [1, 3, 8])
def test_every_sample_once_and_metric_equals_single_process(world):
    assert world == 1 or N % world
    data = list(range(N))
    predictions, labels = _metric_inputs(N)
    samplers = [EvalSampler(data, num_replicas=world, rank=r) for r in range(world)]
    seen = [list(s) for s in samplers]
    flat = sorted(i for part in seen for i in part)
    assert flat == list(range(N))  # every sample once, no padding
    assert [len(s) for s in samplers] == [len(p) for p in seen]
    assert max(map(len, seen)) - min(map(len, seen)) <= 1
    # each rank computes per-sample correctness in its own order; the merged results are in dataset order
    parts = [(predictions[p] == labels[p]).to(torch.int64) for p in map(torch.tensor, seen)]
    merged = interleave(parts, N)
    assert torch.equal(merged, (predictions == labels).to(torch.int64))
    single = (predictions == labels).float().mean()
    assert merged.float().mean() == single


def test_interleave_rejects_a_wrong_share():
    with pytest.raises(ValueError, match="share"):
        interleave([torch.zeros(3), torch.zeros(3)], 5)


def test_single_rank_gather_is_identity():
    sampler = EvalSampler(list(range(7)), num_replicas=1, rank=0)
    values = torch.arange(7) * 2
    assert torch.equal(gather_in_order(values, sampler), values)
    with pytest.raises(ValueError, match="rows"):
        gather_in_order(values[:3], sampler)


def test_bad_rank():
    with pytest.raises(ValueError, match="rank"):
        EvalSampler(list(range(5)), num_replicas=2, rank=2)


def _rank_main(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        predictions, labels = _metric_inputs(N)
        sampler = EvalSampler(list(range(N)))  # rank and world from the group
        mine = torch.tensor(list(sampler))
        logits = torch.nn.functional.one_hot(predictions[mine], 10).float()  # per-sample rows, 2-D
        gathered = gather_in_order(logits, sampler)
        names = gather_in_order([f"sample-{i}" for i in sampler], sampler)  # Python objects too
        assert names == [f"sample-{i}" for i in range(N)]
        if rank == 0:
            torch.save(gathered, out)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_process_gloo_gather(tmp_path):
    from tests.test_distributed import free_port

    out = tmp_path / "gathered.pt"
    mp.start_processes(_rank_main, args=(2, free_port(), str(out)), nprocs=2, start_method="spawn")
    gathered = torch.load(out)
    predictions, labels = _metric_inputs(N)
    assert gathered.shape == (N, 10)
    assert torch.equal(gathered.argmax(1), predictions)
    assert (gathered.argmax(1) == labels).float().mean() == (predictions == labels).float().mean()
