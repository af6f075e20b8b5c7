"""Behaviours torch's own DataLoader tests (tools/torch_dataloader_suite.py) check, kept true here without them."""

import time
import warnings

from torch.utils.data import IterableDataset

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
