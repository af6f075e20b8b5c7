"""DataLoaderX as a drop-in: what torch's DataLoader accepts works, with nothing surprising (issue 28).

shuffle=True without a generator resumes from the seed each pass draws; an order that cannot be replayed warns and
resumes at the next pass instead of raising; plain datasets get plain ints; two live iterators are independent by
default; a forked copy of the process never shuts the owner's workers down.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, RandomSampler, WeightedRandomSampler

from fastdata import DataLoaderX, MixedDataset
from fastdata.sampler.seeding import SampleIndex

N, BATCH = 22, 4  # 6 batches, the last one partial


class Numbers(Dataset):
    """Sample i is (i, i); only plain ints are accepted as indices, as torch's test_splits_indexing_type checks."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i):
        if type(i) is not int:
            raise TypeError(f"index {i!r} is a {type(i).__name__}, not an int")
        return np.float32(i), i


class Lenient(Numbers):
    """Any int subclass goes (for the tests of other things than the index type)."""

    def __getitem__(self, i):
        return np.float32(i), int(i)


class BatchedNumbers(Numbers):
    def __getitems__(self, indices):
        if not isinstance(indices, list) or any(type(i) is not int for i in indices):
            raise TypeError(f"indices {indices!r} are not a list of ints")
        return [self[i] for i in indices]


def _labels(loader, limit: int | None = None) -> list[list[int]]:
    out = []
    for _, labels in loader:
        out.append(labels.tolist())
        if len(out) == limit:
            break
    return out


def _roundtrip(state: dict) -> dict:
    return json.loads(json.dumps(state))


# --------------------------------------------------------------------------- shuffle=True without a generator


@pytest.mark.parametrize("num_workers, persistent", [(0, False), (2, False), (2, True)])
def test_shuffle_without_generator_resumes_mid_pass_from_the_pass_seed(num_workers, persistent):
    def make(cls=DataLoaderX):
        return cls(Lenient(), batch_size=BATCH, shuffle=True, num_workers=num_workers, persistent_workers=persistent)

    torch.manual_seed(3)  # as a trainer seeds the process (seed_everything) in the first run and the resumed one
    loader = make()
    it = iter(loader)
    states, want0 = {}, []
    for k, (_, labels) in enumerate(it, 1):
        want0.append(labels.tolist())
        states[k] = _roundtrip(loader.state_dict())
    want1 = _labels(loader)
    after = torch.rand(3)
    torch.manual_seed(3)
    theirs = make(DataLoader)  # torch's order, and the global RNG left as torch leaves it
    assert [want0, want1] == [_labels(theirs), _labels(theirs)] and torch.equal(torch.rand(3), after)
    assert want0 != want1
    for cut in (1, 3, len(want0)):
        torch.manual_seed(99)  # the resumed pass takes its order from the state, not from the global RNG
        resumed = make()
        resumed.load_state_dict(states[cut])
        assert _labels(resumed) == want0[cut:], f"cut={cut}"
        torch.manual_seed(3)
        resumed = make()
        resumed.load_state_dict(states[cut])
        assert _labels(resumed) == want0[cut:], f"cut={cut}"
        # a resumed iter() draws from the global RNG what torch's draws, so the next pass is the uninterrupted one's
        assert _labels(resumed) == want1, f"cut={cut}"


def test_weighted_sampler_without_generator_resumes_too():
    def make():
        return DataLoaderX(Lenient(), batch_size=BATCH, sampler=WeightedRandomSampler([1.0] * N, N))

    loader = make()
    it = iter(loader)
    _labels(it, limit=2)
    state = _roundtrip(loader.state_dict())
    rest = _labels(it)
    resumed = make()
    resumed.load_state_dict(state)
    assert _labels(resumed) == rest and state["sampler_seed"] is not None


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(range(7))


class _ShuffledByItself(RandomSampler):
    """A generator=None sampler with its own __iter__: fastdata cannot know what it draws."""

    def __iter__(self):
        return iter(torch.randperm(len(self.data_source)).tolist())


class _Opaque:
    def __iter__(self):
        return iter(range(N))

    def __len__(self) -> int:
        return N


@pytest.mark.parametrize(
    "make",
    [
        lambda: DataLoaderX(_Stream(), batch_size=2),
        lambda: DataLoaderX(Lenient(), batch_size=BATCH, sampler=_Opaque()),
        lambda: DataLoaderX(Lenient(), batch_size=BATCH, sampler=_ShuffledByItself(Lenient())),
    ],
    ids=["iterable-dataset", "opaque-sampler", "own-iter-random-sampler"],
)
def test_an_order_that_cannot_be_replayed_warns_and_resumes_at_the_next_pass(make):
    loader = make()
    it = iter(loader)
    next(it)
    with pytest.warns(UserWarning, match="starts at the next pass"):
        state = _roundtrip(loader.state_dict())  # never an exception in the training loop
    assert state["exact"] is False and state["in_pass"] is False and state["pass_number"] == 1
    resumed = make()
    with pytest.warns(UserWarning, match="start of the next pass"):
        resumed.load_state_dict(state)
    full = sum((b.tolist() if isinstance(b, torch.Tensor) else b[1].tolist() for b in resumed), [])
    assert len(full) == (7 if isinstance(loader.dataset, _Stream) else N)  # a whole new pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert resumed.state_dict()["pass_number"] == 2


# --------------------------------------------------------------------------- plain ints for plain datasets


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("dataset", [Numbers(), BatchedNumbers()], ids=["getitem", "getitems"])
def test_plain_datasets_get_plain_ints(dataset, num_workers):
    loader = DataLoaderX(
        dataset, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(0), num_workers=num_workers
    )
    assert sorted(sum(_labels(loader), [])) == list(range(N))
    assert sorted(int(x[1]) for x in DataLoaderX(dataset, batch_size=None, num_workers=num_workers)) == list(range(N))


def test_mixed_dataset_hands_plain_sources_plain_ints():
    mixed = MixedDataset([(Numbers(), 1), (Numbers(), 1)])
    assert mixed[SampleIndex(N + 3, pass_key=5, position=0)][1] == 3
    assert MixedDataset.wants_sample_index is True


# --------------------------------------------------------------------------- two live iterators


def test_two_live_iterators_are_independent_by_default():
    loader = DataLoaderX(Lenient(), batch_size=BATCH, num_workers=2)
    first = iter(loader)
    head = [next(first)[1].tolist()]
    second = _labels(loader)  # a second iter() while the first is unfinished, as with torch's DataLoader
    assert head + _labels(first) == second == _labels(DataLoader(Lenient(), batch_size=BATCH))


def test_with_persistent_workers_an_unfinished_iterator_ends_with_a_warning():
    loader = DataLoaderX(Lenient(), batch_size=BATCH, num_workers=2, persistent_workers=True)
    first = iter(loader)
    next(first)
    with pytest.warns(UserWarning, match="persistent_workers=False"):
        second = iter(loader)
    assert next(first, None) is None and len(_labels(second)) == 6
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a finished iterator ends quietly
        assert len(_labels(loader)) == 6


# --------------------------------------------------------------------------- a fork never cleans up the owner's workers


@pytest.mark.parametrize("persistent", [False, True])
def test_a_forked_copy_never_shuts_the_owners_workers_down(persistent):
    loader = DataLoaderX(
        Lenient(),
        batch_size=1,
        num_workers=2,
        persistent_workers=persistent,
        max_prefetch=1,
        prefetch_factor=1,
        timeout=20,
    )  # workers stopped by the child: a timeout, not a hang
    it = iter(loader)
    got = [next(it)[1].tolist()]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child drops its copies: the loader's and the iterator's clean-up run here
        try:
            os.dup2(write, 2)
            del it, loader
            import gc

            gc.collect()
        finally:
            sys.stderr.flush()
            os._exit(0)
    os.close(write)
    status, errors = _wait(pid, read)
    assert status == 0 and "AssertionError" not in errors and "can only" not in errors, errors
    got += [labels.tolist() for _, labels in it]  # the owner's workers still serve the pass
    assert sum(got, []) == list(range(N))


def _wait(pid: int, read: int, timeout: float = 60.0) -> tuple[int, str]:
    """The child's exit status and what it wrote to stderr; kill it if it hangs."""
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([read], [], [], 0.2)
        if ready:
            chunk = os.read(read, 65536)
            chunks.append(chunk)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            while chunk := os.read(read, 65536):
                chunks.append(chunk)
            os.close(read)
            return os.waitstatus_to_exitcode(status), b"".join(chunks).decode(errors="replace")
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    os.close(read)
    pytest.fail("the forked child hung in DataLoaderX's clean-up")
