"""DataLoaderX: torch parity, background thread, no leaks, exact mid-pass resume."""

from __future__ import annotations

import gc
import inspect
import io
import json
import multiprocessing as mp
import os
import signal
import threading
import time
import traceback

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, RandomSampler
from torch.utils.data.distributed import DistributedSampler as TorchDistributedSampler

from fastdata.loader.collate import fast_collate
from fastdata.loader.dataloader import DataLoaderX
from fastdata.sampler import DistributedSampler

N = 23  # odd on purpose: a partial last batch
BATCH = 4
ENDLESS = 10**9  # leak tests: a pass that never ends by itself, so only a real stop can end the thread


class CountingDataset(Dataset):
    """Tiny map-style dataset: sample i is a uint8 HWC image filled with i; counts loads across workers."""

    def __init__(self, n: int = N) -> None:
        self.n = n
        self.loads = mp.Value("i", 0)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        with self.loads.get_lock():
            self.loads.value += 1
        return np.full((2, 3, 3), i % 256, np.uint8), int(i)


class FailingDataset(Dataset):
    raised: list[BaseException] = []

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int):
        if i == 9:
            _explode_in_getitem(i)
        return np.zeros((2, 2, 3), np.uint8), i


def _explode_in_getitem(i: int) -> None:
    exc = KeyError(f"sample {i} is broken")
    FailingDataset.raised.append(exc)
    raise exc


def _labels(loader, limit: int | None = None) -> list[list[int]]:
    out = []
    for k, (_, labels) in enumerate(loader):
        out.append(labels.tolist())
        if limit is not None and k + 1 == limit:
            break
    return out


# --------------------------------------------------------------------------- signature and attributes


def test_signature_matches_torch():
    ours = inspect.signature(DataLoaderX.__init__).parameters
    theirs = inspect.signature(DataLoader.__init__).parameters
    names = list(ours)
    assert names[: len(theirs)] == list(theirs), "torch's parameters must come first, in torch's order"
    for name, param in theirs.items():
        assert ours[name].kind == param.kind, name
        if name != "pin_memory":
            assert ours[name].default == param.default, name
    assert ours["pin_memory"].default is None and ours["persistent_workers"].default is False
    extra = names[len(theirs) :]
    assert extra == ["max_prefetch", "worker_mode"]
    assert ours["max_prefetch"].kind == inspect.Parameter.KEYWORD_ONLY and ours["max_prefetch"].default == 4
    assert ours["worker_mode"].kind == inspect.Parameter.KEYWORD_ONLY and ours["worker_mode"].default == "process"


def test_defaults_and_attributes():
    ds = CountingDataset()
    plain = DataLoaderX(ds)
    assert plain.pin_memory == torch.cuda.is_available()
    assert plain.persistent_workers is False and plain.max_prefetch == 4
    workers = DataLoaderX(ds, num_workers=1, max_prefetch=2)
    assert workers.persistent_workers is False and workers.max_prefetch == 2  # torch's default
    assert DataLoaderX(ds, num_workers=1, persistent_workers=False, pin_memory=False).persistent_workers is False
    # Lightning rebuilds subclasses from attributes named like the __init__ arguments.
    for name in inspect.signature(DataLoaderX.__init__).parameters:
        if name not in ("self", "shuffle"):  # torch itself does not keep `shuffle`
            assert hasattr(workers, name), name
    kwargs = {
        name: getattr(workers, name)
        for name in (
            "dataset",
            "batch_size",
            "num_workers",
            "collate_fn",
            "pin_memory",
            "persistent_workers",
            "max_prefetch",
        )
    }
    rebuilt = DataLoaderX(**kwargs)
    assert rebuilt.max_prefetch == 2 and len(rebuilt) == len(workers)


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_max_prefetch_is_validated(bad, error):
    with pytest.raises(error, match="max_prefetch"):
        DataLoaderX(CountingDataset(), max_prefetch=bad)


def test_torch_argument_checks_still_apply():
    with pytest.raises(ValueError, match="persistent_workers"):
        DataLoaderX(CountingDataset(), persistent_workers=True)


def test_iterator_len_and_background_thread():
    loader = DataLoaderX(CountingDataset(), batch_size=BATCH, collate_fn=fast_collate)
    it = iter(loader)
    assert len(it) == len(loader) == 6
    assert any(t.name.startswith("DataLoaderX-prefetch") for t in threading.enumerate())
    images, labels = next(it)
    assert images.shape == (BATCH, 3, 2, 3) and labels.tolist() == [0, 1, 2, 3]
    it.close()
    assert next(it, None) is None
    assert not any(t.name.startswith("DataLoaderX-prefetch") for t in threading.enumerate())


def test_iterator_outlives_a_temporary_loader():
    # The loader is garbage as soon as iter() returns; its persistent workers must serve the whole pass.
    got = [
        labels.tolist()
        for _, labels in DataLoaderX(CountingDataset(), batch_size=BATCH, num_workers=2, persistent_workers=True)
    ]
    assert sum(got, []) == list(range(N))
    gc.collect()
    _wait_until(lambda: _children() == 0, "the workers of a temporary loader outlived its iterator")


@pytest.mark.parametrize("num_workers", [0, 1])
def test_iterable_dataset_and_no_batching(num_workers):
    assert [b.tolist() for b in DataLoaderX(_Stream(), batch_size=2, num_workers=num_workers)] == [[0, 1], [2, 3], [4]]
    assert [int(x) for x in DataLoaderX(list(range(4)), batch_size=None, num_workers=num_workers)] == [0, 1, 2, 3]


# --------------------------------------------------------------------------- parity with torch


@pytest.mark.parametrize("num_workers, persistent", [(0, False), (2, False), (2, True)])
def test_same_batches_as_torch(num_workers, persistent):
    def make(cls):
        return cls(
            CountingDataset(),
            batch_size=BATCH,
            shuffle=True,
            num_workers=num_workers,
            collate_fn=fast_collate,
            generator=torch.Generator().manual_seed(7),
            persistent_workers=persistent,
        )

    ours, theirs = make(DataLoaderX), make(DataLoader)
    for _ in range(2):
        got, want = list(ours), list(theirs)
        assert [b[1].tolist() for b in got] == [b[1].tolist() for b in want]
        assert all(torch.equal(a[0], b[0]) for a, b in zip(got, want, strict=False))


# --------------------------------------------------------------------------- exceptions


@pytest.mark.parametrize("num_workers, persistent", [(0, False), (2, False), (2, True)])
def test_exception_keeps_type_and_traceback(num_workers, persistent):
    FailingDataset.raised.clear()
    threads = threading.active_count()
    loader = DataLoaderX(
        FailingDataset(),
        batch_size=BATCH,
        num_workers=num_workers,
        collate_fn=fast_collate,
        persistent_workers=persistent,
    )
    with pytest.raises(KeyError) as info:
        for _ in loader:
            pass
    text = "".join(traceback.format_exception(info.value)) + str(info.value)
    assert "_explode_in_getitem" in text and "sample 9 is broken" in text
    if num_workers == 0:
        assert info.value is FailingDataset.raised[0]  # the very object the dataset raised
    else:
        assert "worker process" in str(info.value)
    if persistent:
        del loader  # persistent workers live as long as the loader, then go at once
    # The exception (kept alive here) references torch's iterator; the workers must be gone anyway.
    _wait_until(lambda: threading.active_count() <= threads and _children() == 0, "an exception leaked")
    del info


# --------------------------------------------------------------------------- leaks


_SERVICE_PROCESSES = ("resource_tracker", "forkserver")  # multiprocessing helpers that live for the whole session


def _children() -> int:
    """Child processes of this test process, not counting multiprocessing's session-long helpers."""
    import psutil

    count = 0
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
        except psutil.Error:
            continue
        count += not any(name in cmdline for name in _SERVICE_PROCESSES)
    return count


def _wait_until(condition, message: str, deadline_s: float = 20.0) -> None:
    """Poll (feeder threads and workers exit asynchronously); fail only if it never happens."""
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(message)
        time.sleep(0.05)


@pytest.mark.parametrize("persistent", [False, True])
def test_hundred_early_breaks_leak_nothing(persistent):
    loader = DataLoaderX(
        CountingDataset(ENDLESS), batch_size=2, num_workers=2, persistent_workers=persistent, collate_fn=fast_collate
    )
    next(iter(loader))  # persistent workers start once; count with them alive
    gc.collect()
    _wait_until(lambda: _children() == (2 if persistent else 0), "workers of the first pass are still alive")
    threads, children = threading.active_count(), _children()
    for _ in range(100):
        for _ in loader:
            break
    _wait_until(lambda: threading.active_count() <= threads, f"threads grew from {threads}: {threading.enumerate()}")
    _wait_until(lambda: _children() <= children, f"child processes grew from {children}")
    del loader
    gc.collect()
    _wait_until(lambda: _children() == 0, "persistent workers outlived their loader")


@pytest.mark.parametrize("how", ["del", "gc-cycle", "exception", "keyboard-interrupt", "close"])
def test_every_way_out_cleans_up(how):
    loader = DataLoaderX(CountingDataset(ENDLESS), batch_size=2, num_workers=2, persistent_workers=False)
    threads = threading.active_count()
    it = iter(loader)
    next(it)
    assert _children() == 2
    if how == "del":
        del it
    elif how == "gc-cycle":
        it.cycle = [it]
        del it
        gc.collect()
    elif how == "close":
        it.close()
        del it
    else:
        error = RuntimeError if how == "exception" else KeyboardInterrupt
        with pytest.raises(error):
            for _ in it:
                raise error("in the training loop")
        del it
    _wait_until(lambda: threading.active_count() <= threads and _children() == 0, f"{how} leaked")


class _SlowDataset(Dataset):
    def __len__(self) -> int:
        return 1000

    def __getitem__(self, i: int):
        if i == 2:
            os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C while the main thread waits for data
        time.sleep(0.02)
        return np.zeros((2, 2, 3), np.uint8), i


def test_ctrl_c_while_waiting_for_data_is_clean():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # a background CI job may ignore SIGINT
    try:
        _ctrl_c_while_waiting_for_data()
    finally:
        signal.signal(signal.SIGINT, previous)


def _ctrl_c_while_waiting_for_data():
    threads = threading.active_count()
    loader = DataLoaderX(_SlowDataset(), batch_size=1, max_prefetch=1)
    with pytest.raises(KeyboardInterrupt):
        for _ in loader:
            pass
    _wait_until(lambda: threading.active_count() <= threads, "a Ctrl-C left the prefetch thread running")


# --------------------------------------------------------------------------- resume


def _make(kind: str, num_workers: int, persistent: bool = False) -> DataLoaderX:
    ds = CountingDataset()
    kwargs = dict(batch_size=BATCH, num_workers=num_workers, collate_fn=fast_collate, persistent_workers=persistent)
    if kind.startswith("fastdata-dist"):
        ratio = int(kind.rsplit("-", 1)[1])
        return DataLoaderX(ds, sampler=DistributedSampler(ds, num_replicas=2, rank=1, seed=5, ratio=ratio), **kwargs)
    if kind == "torch-dist":
        return DataLoaderX(ds, sampler=TorchDistributedSampler(ds, num_replicas=2, rank=0, seed=5), **kwargs)
    if kind == "random":
        return DataLoaderX(ds, shuffle=True, generator=torch.Generator().manual_seed(11), **kwargs)
    if kind == "random-own-generator":
        sampler = RandomSampler(ds, generator=torch.Generator().manual_seed(3))
        return DataLoaderX(ds, sampler=sampler, generator=torch.Generator().manual_seed(4), **kwargs)
    assert kind == "sequential"
    return DataLoaderX(ds, **kwargs)


def _epoch(loader: DataLoaderX, epoch: int, limit: int | None = None) -> list[list[int]]:
    if hasattr(loader.sampler, "set_epoch"):
        loader.sampler.set_epoch(epoch)
    return _labels(loader, limit)


def _roundtrip(state: dict) -> dict:
    return json.loads(json.dumps(state))


# The brief's matrix (samplers x num_workers 0/2, persistent workers with 2) plus a few extras.
RESUME_CASES = [
    (kind, nw, nw > 0) for kind in ("fastdata-dist-1", "fastdata-dist-3", "random", "sequential") for nw in (0, 2)
]
RESUME_CASES += [
    ("torch-dist", 0, False),
    ("random-own-generator", 0, False),
    ("random-own-generator", 2, True),
    ("random", 2, False),
    ("fastdata-dist-3", 2, False),
]
SETUPS = [(0, False), (2, True), (2, False)]  # (num_workers, persistent_workers)


def _run_recording_states(loader: DataLoaderX) -> tuple[list[list[list[int]]], dict[int, dict]]:
    """An uninterrupted 3-pass run that takes state_dict() after every batch of pass 1."""
    want = [_epoch(loader, 0)]
    if hasattr(loader.sampler, "set_epoch"):
        loader.sampler.set_epoch(1)
    it = iter(loader)
    states = {0: _roundtrip(loader.state_dict())}
    want.append([])
    for k, (_, labels) in enumerate(it, 1):
        want[1].append(labels.tolist())
        states[k] = _roundtrip(loader.state_dict())
    want.append(_epoch(loader, 2))
    return want, states


@pytest.mark.parametrize("kind, num_workers, persistent", RESUME_CASES)
def test_resume_mid_pass_is_exact(kind, num_workers, persistent):
    want, states = _run_recording_states(_make(kind, num_workers, persistent))
    assert want[0] != want[1] or kind == "sequential"
    n = len(want[1])
    for cut in sorted({0, 1, n // 2, n - 1, n}):  # n: the last batch consumed, StopIteration not yet seen
        state = states[cut]
        assert state["batches_consumed"] == cut and state["in_pass"] is True
        resumed = _make(kind, num_workers, persistent)
        resumed.load_state_dict(state)
        loads = resumed.dataset.loads
        rest = _epoch(resumed, 1)
        assert rest == want[1][cut:], f"cut={cut}"
        assert loads.value == sum(len(b) for b in rest), "skipped samples must not be loaded"
        assert _epoch(resumed, 2) == want[2], f"the pass after the resumed one must be full (cut={cut})"


@pytest.mark.parametrize("num_workers, persistent", SETUPS)
@pytest.mark.parametrize("kind", ["fastdata-dist-3", "random"])
def test_resume_between_passes_and_twice(kind, num_workers, persistent):
    reference = _make(kind, num_workers, persistent)
    want = [_epoch(reference, e) for e in range(3)]
    original = _make(kind, num_workers, persistent)
    _epoch(original, 0)
    between = _roundtrip(original.state_dict())
    assert between["batches_consumed"] == 0 and between["in_pass"] is False
    first = _make(kind, num_workers, persistent)
    first.load_state_dict(between)
    assert _epoch(first, 1, limit=2) == want[1][:2]
    second = _make(kind, num_workers, persistent)
    second.load_state_dict(_roundtrip(first.state_dict()))
    assert _epoch(second, 1, limit=3) == want[1][2:5]  # a resumed pass resumed again
    third = _make(kind, num_workers, persistent)
    third.load_state_dict(_roundtrip(second.state_dict()))
    assert third.state_dict()["batches_consumed"] == 5  # a loaded state reads back before iter()
    assert _epoch(third, 1) == want[1][5:]
    assert _epoch(third, 2) == want[2]


def test_fastdata_sampler_skips_by_start_index():
    _, states = _run_recording_states(_make("fastdata-dist-3", 0))
    resumed = _make("fastdata-dist-3", 0)
    resumed.load_state_dict(states[5])
    resumed.sampler.set_epoch(1)
    starts = []
    generate = resumed.sampler._generate
    resumed.sampler._generate = lambda start, *rest: (starts.append(start), generate(start, *rest))[1]
    it = iter(resumed)
    next(it)
    # The sampler itself starts after the consumed batches: no index of them is even generated.
    # (Read what it was asked for: the background thread may already have drained it.)
    assert starts == [5 * BATCH]
    assert resumed.state_dict()["batches_consumed"] == 6
    it.close()


def test_state_survives_torch_save_and_load():
    loader = _make("random", 0)
    _labels(loader, limit=3)
    buffer = io.BytesIO()
    torch.save(loader.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert state == loader.state_dict()
    resumed = _make("random", 0)
    resumed.load_state_dict(state)
    assert _labels(resumed) == _labels(_make("random", 0))[3:]


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(range(5))


class _OpaqueSampler:
    def __iter__(self):
        return iter(range(N))

    def __len__(self) -> int:
        return N


def test_state_from_a_different_loader_is_rejected():
    state = _make("random", 0).state_dict()
    with pytest.raises(ValueError, match="batches per pass"):
        DataLoaderX(CountingDataset(), batch_size=5, shuffle=True, generator=torch.Generator()).load_state_dict(state)
    with pytest.raises(ValueError, match="generator"):
        _make("random-own-generator", 0).load_state_dict(state)
    with pytest.raises(ValueError, match="missing"):
        _make("random", 0).load_state_dict({"version": 1})
    with pytest.raises(TypeError, match="dict"):
        _make("random", 0).load_state_dict([1, 2])
