"""Behaviours torch's own DataLoader tests (tools/torch_dataloader_suite.py) check, kept true here without them."""

import time
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from fastdata import DataLoaderX


class Counting(IterableDataset):
    """Yields range(n) in every worker, so 2 workers yield twice the reported length."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self) -> int:
        return self.n


def _fetched_warnings(iterator, steps: int) -> int:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(steps):
            next(iterator)
    return sum("samples have been fetched" in str(w.message) for w in caught)


def test_the_length_warning_comes_with_the_batch_that_passes_the_reported_length():
    loader = DataLoaderX(Counting(12), num_workers=2, persistent_workers=False, max_prefetch=16)
    assert _fetched_warnings(iter(loader), 24) == 0  # len() not asked yet: nothing to compare with
    assert len(loader) == 12
    it = iter(loader)
    assert _fetched_warnings(it, 12) == 0
    time.sleep(1.0)  # the background thread fetches the other 12 batches ahead meanwhile
    assert _fetched_warnings(it, 3) == 3  # one per batch past the length, when the loop receives it


def test_the_pass_iterator_shows_torchs_iterator_attributes():
    it = iter(DataLoaderX(Counting(4), num_workers=2, persistent_workers=False))
    assert len(it._workers) == 2 and it._num_workers == 2
    it.close()


# --------------------------------------------------------------------------- a batch that raises


class SomeBroken(Dataset):
    """Sample i is i, except every 7th (from 3) raises; so do the batches that hold one."""

    def __len__(self) -> int:
        return 30

    def __getitem__(self, i: int) -> int:
        if i % 7 == 3:
            raise ValueError(f"sample {i} is broken")
        return int(i)


def _outcomes(iterator, steps: int | None = None) -> list:
    """What each next() gives: a batch's samples, or "error"; stops at the end of the pass (or after ``steps``)."""
    seen = []
    while steps is None or len(seen) < steps:
        try:
            seen.append(next(iterator).tolist())
        except ValueError as exc:
            assert "is broken" in str(exc)
            seen.append("error")
        except StopIteration:
            break
    return seen


def _broken_loader(cls, num_workers: int, persistent: bool):
    return cls(
        SomeBroken(),
        batch_size=2,
        shuffle=True,
        num_workers=num_workers,
        persistent_workers=persistent,
        generator=torch.Generator().manual_seed(3),
    )


@pytest.mark.parametrize("num_workers, persistent", [(0, False), (2, False), (2, True)])
def test_the_pass_goes_on_after_a_batch_that_raises_as_with_torch(num_workers, persistent):
    ours, theirs = (
        _broken_loader(DataLoaderX, num_workers, persistent),
        _broken_loader(DataLoader, num_workers, persistent),
    )
    for _ in range(2):  # a second pass works as well (same workers when persistent)
        got, want = _outcomes(iter(ours)), _outcomes(iter(theirs))
        assert got == want
        assert len(got) == len(ours) and 0 < got.count("error") < len(got)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_right_after_a_batch_that_raised(num_workers):
    whole = _outcomes(iter(_broken_loader(DataLoaderX, num_workers, False)))
    at = whole.index("error") + 1  # the checkpoint is taken just after the loop saw the error
    first = _broken_loader(DataLoaderX, num_workers, False)
    it = iter(first)
    assert _outcomes(it, at) == whole[:at]
    state = first.state_dict()
    assert state["batches_consumed"] == at
    it.close()
    resumed = _broken_loader(DataLoaderX, num_workers, False)
    resumed.load_state_dict(state)
    assert _outcomes(iter(resumed)) == whole[at:]


def test_the_loader_is_generic_like_torchs():
    """torch's ``DataLoader[T]`` annotations (``def make() -> DataLoader[list[Tensor]]``) work with DataLoaderX."""
    alias = DataLoaderX[list[torch.Tensor]]
    assert alias.__origin__ is DataLoaderX and alias.__args__ == (list[torch.Tensor],)
