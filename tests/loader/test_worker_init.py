"""Every DataLoaderX worker freezes the objects it started with out of the garbage collector (so its full
collections do not copy its parent's pages), runs the user's ``worker_init_fn`` after that, and still collects
the garbage it makes itself."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from fastdata.loader.dataloader import DataLoaderX

_seen_by_user_init: list[int] = []


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def _user_init(worker_id: int) -> None:
    _seen_by_user_init.append(gc.get_freeze_count())


class FreezeProbe(torch.utils.data.Dataset):
    """Item ``i``: (objects frozen in this worker, what the user's init saw, a cycle made here was collected)."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> tuple[int, int, bool]:
        cycle = _Cycle()
        gone = weakref.ref(cycle)
        del cycle
        gc.collect()
        return gc.get_freeze_count(), _seen_by_user_init[-1] if _seen_by_user_init else -1, gone() is None


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_freeze_what_they_started_with_and_collect_what_they_make(context):
    loader = DataLoaderX(
        FreezeProbe(), batch_size=None, num_workers=2, multiprocessing_context=context, worker_init_fn=_user_init
    )
    items = list(loader)
    assert len(items) == 4
    for frozen, seen_by_user, collected in items:
        assert frozen > 1000  # the modules and the dataset: torch alone is tens of thousands of objects
        assert seen_by_user > 1000  # the user's worker_init_fn runs after the freeze
        assert collected  # the worker's own cycles are still collected
    assert gc.get_freeze_count() == 0  # the main process is left as it was


def test_run_in_the_process_that_made_it_it_freezes_nothing(monkeypatch):
    """A context whose workers are threads of the main process (``multiprocessing.dummy``) must not freeze it."""
    import multiprocessing.queues

    from torch.utils.data._utils import worker

    from fastdata.loader.worker_init import WorkerInit

    monkeypatch.setattr(worker, "ExceptionWrapper", worker.ExceptionWrapper)  # restored after: WorkerInit sets them
    monkeypatch.setattr(
        multiprocessing.queues.Queue, "_on_queue_feeder_error", multiprocessing.queues.Queue._on_queue_feeder_error
    )
    WorkerInit(None)(0)
    assert gc.get_freeze_count() == 0
