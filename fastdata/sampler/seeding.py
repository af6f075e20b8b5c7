"""Reproducible augmentation: the random generator of each sample, derived from (pass, position, index).

DataLoader workers only see indices, and which worker loads which sample depends on
``num_workers`` and timing, so a transform drawing from the process's RNG gives different pixels
for different ``num_workers`` and after a resume. Instead, :class:`~fastdata.DataLoaderX` hands
a dataset that asks for them (a true ``wants_sample_index`` attribute, see :func:`wants_sample_index`:
:class:`~fastdata.ShardDataset` and :class:`~fastdata.MixedDataset` have one) :class:`SampleIndex` objects:
ints that also carry a key of the pass that drew them and their position in that pass; any other dataset
gets plain ``int`` indices, as from torch's ``DataLoader``. A dataset turns them
into a generator with :func:`sample_generator`; :class:`~fastdata.ShardDataset` passes it to
decode-time transforms that take one (``RandomResizedCrop``), so the crop of a sample depends only
on (pass, position in the pass, index): the same whatever ``num_workers`` is, and the same in a
resumed run as in an uninterrupted one.

The pass key is derived in the main process from what decides the pass's order (the seeded
generators' states, the sampler's ``state_dict()``); see ``DataLoaderX``. The generator is numpy's
counter-based Philox keyed by the pass, its counter starting at ``(0, 0, position, index)``; making
one costs about 9 microseconds.
"""

from __future__ import annotations

import hashlib
import json
import numbers
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import numpy.random  # noqa: F401 - numpy imports it lazily: at import, not inside a loader's first batch (~12 ms)
from typing_extensions import override

__all__ = ["SampleIndex", "derive_pass_key", "keyed_indices", "sample_generator", "wants_sample_index"]

_MASK64 = (1 << 64) - 1


class SampleIndex(int):
    """A dataset index that also says which pass drew it and where.

    Behaves as the ``int`` it is everywhere (indexing, hashing, comparison, ``str``/``repr`` and
    f-strings print the number, arithmetic returns a plain ``int``); pickles small, so it travels
    to DataLoader workers.

    Args:
        index: the sample index.
        pass_key: a 64-bit key of the pass (see ``derive_pass_key`` in this module).
        position: the index's position in the pass, counted from the pass's start.

    Example::

        ds[SampleIndex(7, pass_key=1234, position=0)]   # the crop of sample 7, drawn reproducibly
    """

    pass_key: int
    position: int

    @override
    def __new__(cls, index: int, pass_key: int, position: int) -> SampleIndex:
        obj = super().__new__(cls, index)
        obj.pass_key = int(pass_key) & _MASK64
        obj.position = int(position)
        return obj

    def __reduce__(self) -> tuple:
        return SampleIndex, (int(self), self.pass_key, self.position)


def wants_sample_index(dataset: Any) -> bool:
    """Whether ``dataset`` asks the loader for ``SampleIndex`` indices.

    Whether ``dataset`` asks the loader for :class:`SampleIndex` indices (class attribute ``wants_sample_index =
    True``).

    A dataset that draws random decode-time transforms from :func:`sample_generator` sets it; every other
    dataset gets plain ``int`` indices (``type(index) is int``), as torch's ``DataLoader`` gives them.
    """
    return getattr(dataset, "wants_sample_index", False) is True


def sample_generator(index: Any) -> np.random.Generator | None:
    """The generator a sample's random transforms draw from; None for a plain index.

    Args:
        index: a :class:`SampleIndex` (anything else gives None: draw as before, from torch's RNG).

    Returns:
        ``np.random.Generator(np.random.Philox(key=pass_key, counter=[0, 0, position, index]))``:
        independent streams for different (pass, position, index), identical for identical ones.
    """
    key = getattr(index, "pass_key", None)
    if key is None:
        return None
    counter = [0, 0, index.position & _MASK64, int(index) & _MASK64]
    return np.random.Generator(np.random.Philox(key=key, counter=counter))


def derive_pass_key(parts: dict[str, Any]) -> int:
    """A 64-bit key from JSON-able ``parts`` (BLAKE2b of their canonical JSON).

    Args:
        parts: what identifies a pass (generator states, sampler state, ...).

    Raises:
        TypeError: a part is not JSON-able.
    """
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=_jsonable)
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def _jsonable(value: Any) -> Any:
    if callable(getattr(value, "tolist", None)):  # numpy scalars and arrays, torch tensors
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"cannot derive a pass key from a {type(value).__name__} in the sampler's state")


def keyed_indices(items: Iterable[Any], pass_key: int, position: int, *, batched: bool, skip: int = 0) -> Iterator[Any]:
    """The sampler's items with every integer index turned into a :class:`SampleIndex`.

    Args:
        items: what the (batch) sampler yields: batches (lists of indices) when ``batched``, else indices.
        pass_key: the key of the pass.
        position: the position of the first item's first index in the pass.
        batched: whether items are batches.
        skip: items to drop first (consumed batches of a resumed pass); their indices still count positions.

    Yields:
        The items, integer indices wrapped (other index types pass through unchanged).
    """
    it = iter(items)
    for _ in range(skip):
        item = next(it, _END)
        if item is _END:
            return
        position += len(item) if batched and hasattr(item, "__len__") else 1
    for item in it:
        if batched and isinstance(item, (list, tuple)):
            yield [_wrap(i, pass_key, position + k) for k, i in enumerate(item)]
            position += len(item)
        else:
            yield item if batched else _wrap(item, pass_key, position)
            position += len(item) if batched and hasattr(item, "__len__") else 1


_END = object()


def _wrap(index: Any, pass_key: int, position: int) -> Any:
    if isinstance(index, numbers.Integral) and not isinstance(index, bool):
        return SampleIndex(int(index), pass_key, position)
    return index
