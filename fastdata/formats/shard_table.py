"""A manifest's shard list held as columns: what a reader keeps of it, in every process, for 10k+ shards.

A :class:`~fastdata.formats.manifest_entries.ShardInfo` per shard (a frozen dataclass with its own ``__dict__`` and
four checksum strings) costs about 800 bytes; 16,000 shards held 13 MB in every DataLoader worker. A
:class:`ShardTable` keeps the numbers and checksums in int64 arrays (a missing value as -1) and the names in one
UTF-8 blob (:class:`Names`), about 90 bytes a shard plus its names, and builds the ``ShardInfo`` of the shard asked
for, so code that indexes or iterates ``manifest.shards`` reads it unchanged. Readers open a pack with it
(:func:`~fastdata.formats.packed.open_pack` with ``compact=True``); writers keep plain lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from fastdata.formats.manifest_entries import ShardInfo

__all__ = ["CHECKSUM_COLUMNS", "NUMBER_COLUMNS", "Names", "Rows", "ShardTable"]

NUMBER_COLUMNS = ("num_samples", "nbytes", "index_nbytes", "transcoded")  # int64 columns, -1 for None (all are >= 0)
CHECKSUM_COLUMNS = ("crc32c", "index_crc32c", "meta_crc32c")  # 8 hex digits → uint32 columns, with a "present" mask


class Rows(Sequence):
    """A read-only sequence whose items are built on access.

    A read-only sequence whose items are built on access by :meth:`_row` (a normalised index in range); slices
    give lists, and an index out of range raises ``IndexError``.
    """

    def _row(self, k: int):  # pragma: no cover - each subclass builds its own
        raise NotImplementedError

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        return self._row(range(len(self))[k])


class ShardTable(Rows):
    """The shards of a manifest, in order, as columns.

    The shards of a manifest, in order, as columns (see the module docstring); a read-only sequence of
    :class:`ShardInfo` built on access.

    Args:
        shards: the shards (consumed one at a time: a generator holds one ``ShardInfo`` at a time).
    """

    def __init__(self, shards: Iterable[ShardInfo]) -> None:
        paths: list[str] = []
        indexes: list[str | None] = []
        numbers: list[tuple[int, ...]] = []
        sums: list[tuple[int, ...]] = []
        for info in shards:
            paths.append(info.path)
            indexes.append(info.index)
            numbers.append(tuple(-1 if getattr(info, k) is None else getattr(info, k) for k in NUMBER_COLUMNS))
            sums.append(tuple(-1 if getattr(info, k) is None else int(getattr(info, k), 16) for k in CHECKSUM_COLUMNS))
        self.paths, self.indexes = Names(paths), Names(indexes)
        self._numbers = np.array(numbers, dtype=np.int64).reshape(-1, len(NUMBER_COLUMNS))
        self._sums = np.array(sums, dtype=np.int64).reshape(-1, len(CHECKSUM_COLUMNS))

    @classmethod
    def from_columns(
        cls, paths: Sequence[str], indexes: Sequence[str | None], numbers: np.ndarray, sums: np.ndarray
    ) -> ShardTable:
        """A table from checked columns (what a manifest's bulk check gives).

        ``numbers`` and ``sums`` are int64 of shape (shards, 4) and (shards, 3), in the order of ``NUMBER_COLUMNS``
        and ``CHECKSUM_COLUMNS``, -1 for None.
        """
        return _rebuilt(Names(paths), Names(indexes), numbers, sums)

    @property
    def num_samples(self) -> np.ndarray:
        """int64 records per shard (read-only view)."""
        view = self._numbers[:, 0]
        view.flags.writeable = False
        return view

    @property
    def total_samples(self) -> int:
        """Records over all shards."""
        return int(self._numbers[:, 0].sum())

    def __len__(self) -> int:
        return len(self.paths)

    def _row(self, shard: int) -> ShardInfo:
        num_samples, nbytes, index_nbytes, transcoded = self._numbers[shard].tolist()  # the columns of NUMBER_COLUMNS
        crc32c, index_crc32c, meta_crc32c = self._sums[shard].tolist()  # the columns of CHECKSUM_COLUMNS
        return ShardInfo(
            path=self.paths[shard],
            num_samples=num_samples,  # the required fields are never -1 (None)
            nbytes=nbytes,
            crc32c=f"{crc32c:08x}",
            index=self.indexes[shard],
            index_nbytes=None if index_nbytes < 0 else index_nbytes,
            index_crc32c=None if index_crc32c < 0 else f"{index_crc32c:08x}",
            meta_crc32c=None if meta_crc32c < 0 else f"{meta_crc32c:08x}",
            transcoded=None if transcoded < 0 else transcoded,
        )

    def __iter__(self) -> Iterator[ShardInfo]:
        return (self[k] for k in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=False))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ShardTable({len(self)} shards, {self.total_samples} samples)"

    def __reduce__(self):
        return (_rebuilt, (self.paths, self.indexes, self._numbers, self._sums))


class Names(Rows):
    """Strings (or None) held as one UTF-8 blob and an array of offsets.

    Strings (or None) held as one UTF-8 blob and an int64 array of offsets (-1: None): no ``str`` object per
    entry survives the manifest's parse, so its memory goes back to the allocator; an entry is decoded when read.
    """

    def __init__(self, values: Sequence[str | None]) -> None:
        encoded = [b"" if v is None else v.encode("utf-8") for v in values]
        self._blob = b"".join(encoded)
        ends = np.cumsum([len(e) for e in encoded], dtype=np.int64)
        self._ends = np.where([v is None for v in values], -1, ends).astype(np.int64) if len(values) else ends
        self._starts = np.concatenate([[0], ends[:-1]]).astype(np.int64) if len(values) else ends

    def __len__(self) -> int:
        return len(self._ends)

    def _row(self, k: int) -> str | None:
        end = int(self._ends[k])
        return None if end < 0 else self._blob[int(self._starts[k]) : end].decode("utf-8")


def _rebuilt(paths: Names, indexes: Names, numbers: np.ndarray, sums: np.ndarray) -> ShardTable:
    table = ShardTable(())
    table.paths, table.indexes, table._numbers, table._sums = paths, indexes, numbers, sums
    return table
