"""Hugging Face Accelerate: the recipe that keeps DataLoaderX resumes mid-pass on 2 CPU processes exactly, and a
DataLoaderX handed to ``accelerator.prepare()`` says at once what happens to it."""

from __future__ import annotations

import warnings

import pytest
import torch
from accelerate import Accelerator
from torch.utils.data import TensorDataset

import fastdata
from tests.trainers.common import EPOCHS, make_pack, read_seen, run

STEPS_PER_EPOCH = 24 // 2 // 2  # 24 samples, 2 ranks, batches of 2


@pytest.mark.slow
def test_recipe_on_two_processes_resumes_mid_pass_with_the_same_batches(tmp_path):
    pack, out = make_pack(tmp_path), tmp_path / "out"
    out.mkdir()
    script = [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "tests/trainers/accelerate_recipe.py",
        str(pack),
        str(out),
    ]
    stop_at = 4  # in the first pass, so the resumed run crosses into the second
    run(script + ["full"])
    run(script + ["first", str(stop_at)])
    run(script + ["resume"])
    for rank in (0, 1):
        full = read_seen(out, "full", rank)
        assert len(full) == EPOCHS * STEPS_PER_EPOCH and len(set(full)) == len(full)
        assert read_seen(out, "first", rank) == full[:stop_at]
        assert read_seen(out, "resume", rank) == full[stop_at:]
    assert set(read_seen(out, "full", 0)).isdisjoint(read_seen(out, "full", 1))  # each rank its own samples


def _loader(**kwargs) -> fastdata.DataLoaderX:
    dataset = TensorDataset(torch.arange(16).float().view(16, 1), torch.zeros(16, dtype=torch.long))
    return fastdata.DataLoaderX(dataset, batch_size=4, **kwargs)


def _prepare(loader):
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(1, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, prepared = accelerator.prepare(model, loader)
    return prepared, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def test_prepare_warns_that_it_replaces_an_unsharded_loader_and_names_the_recipe():
    loader = _loader(shuffle=True, generator=torch.Generator().manual_seed(0))
    prepared, messages = _prepare(loader)
    assert prepared is not loader and not isinstance(prepared, fastdata.DataLoaderX)  # Accelerate's own now
    [message] = [m for m in messages if "DataLoaderX" in m]
    assert "replaces this fastdata.DataLoaderX with a plain torch DataLoader" in message
    assert "register_for_checkpointing" in message and "DataPrefetcher" in message and "\n" not in message


def test_prepare_keeps_a_loader_whose_sampler_shards_and_says_what_is_left_to_do():
    dataset = TensorDataset(torch.arange(16).float().view(16, 1), torch.zeros(16, dtype=torch.long))
    sampler = fastdata.DistributedSampler(dataset, num_replicas=1, rank=0, seed=0)
    loader = fastdata.DataLoaderX(dataset, batch_size=4, sampler=sampler)
    prepared, messages = _prepare(loader)
    assert prepared is loader  # the background thread, the order and state_dict() are all kept
    [message] = [m for m in messages if "DataLoaderX" in m]
    assert "keeps this fastdata.DataLoaderX as it is" in message and "DataPrefetcher" in message
    assert loader.state_dict()["batches_consumed"] == 0 and len(list(prepared)) == 4


def test_reading_the_flag_outside_accelerate_says_nothing():
    loader = _loader()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert loader._is_accelerate_prepared is False
