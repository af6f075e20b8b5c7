"""A dataset some of whose samples the worker cannot send (importable, so spawn workers get it too)."""

from __future__ import annotations

import errno

import torch


class Unsendable:
    """Pickling it fails in the worker's queue feeder thread, as sharing a tensor's memory does on EMFILE or ENOMEM."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __reduce__(self):
        raise self.error


class PartlyUnsendable(torch.utils.data.Dataset):
    """Ten samples ``[tensor([i, i])]``; 3 fails to send with EMFILE, 5 with MemoryError, 7 holds a lambda."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> list:
        sample = [torch.full((2,), i)]
        if i == 3:
            sample.append(Unsendable(OSError(errno.EMFILE, "Too many open files")))
        elif i == 5:
            sample.append(Unsendable(MemoryError("no memory to share the batch")))
        elif i == 7:
            sample.append(lambda: i)  # a batch that does not pickle at all
        return sample


def as_is(sample: list) -> list:
    return sample
