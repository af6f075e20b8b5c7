"""Reading an LMDB shard without trusting its page structure.

py-lmdb follows the file's page numbers and value lengths as they are: one flipped bit in a page
header, a stored value length or an overflow page number makes it read outside the mapping and the
process dies of SIGBUS or SIGSEGV, in a reader, in a DataLoader worker or in ``fastdata verify``.
So fastdata's readers do not hand the file to LMDB. :func:`index_values` walks the B-tree of the
main database itself, from the newer of the two meta pages down to every leaf, with ``pread`` and
checks every number before it is used (page numbers inside the file and the tree, each page's own
number and type, node offsets and key and value lengths inside their page, overflow runs inside
the file, no page visited twice, depth as recorded). The result is the offset and length of every
value in the file, kept in compact numpy arrays by the number of its key (13 bytes a value, no
Python object per record: a worker's memory follows the shards it has open, not the records it
has read); records are then read with ``pread`` of exactly those bytes and checked against
their CRC32C as before. Damage is therefore always a :class:`CorruptRecordError`, never a signal.

The walk reads only branch and leaf pages (a few dozen for a 256 MB shard of ~100 KB images);
an overflow run's own header is checked when its value is read, in the same ``pread``. Only what fastdata's writer
produces is accepted: a plain main database (no sub-databases, no duplicate keys), 64-bit page numbers.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fastdata.formats.errors import CorruptRecordError

__all__ = ["PAGE_HEADER", "PAGE_SIZES", "LMDBIndex", "Located", "index_values"]

_MAGIC = 0xBEEFC0DE
_VERSION = 1
_PAGE_HEADER = 16
PAGE_HEADER = _PAGE_HEADER  # an overflow value starts this many bytes into its first page
PAGE_SIZES = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)  # the page sizes LMDB uses
_NODE_HEADER = 8
_P_BRANCH, _P_LEAF, _P_OVERFLOW, _P_META, _P_LEAF2 = 0x01, 0x02, 0x04, 0x08, 0x20
_F_BIGDATA, _F_SUBDATA, _F_DUPDATA = 0x01, 0x02, 0x04
_META = struct.Struct("<QHHHHIIQQ")  # page header, then magic, version, address, map size
_DB = struct.Struct("<IHHQQQQQ")  # pad (page size in the free DB), flags, depth, branch, leaf, overflow, entries, root
_DB_OFFSET = _META.size  # two MDB_db records follow the fields above
_TAIL = struct.Struct("<QQ")  # last page number, transaction id
_NODE = struct.Struct("<HHHH")  # lo, hi, flags, key size
_MAX_DEPTH = 64


@dataclass(frozen=True)
class Located:
    """Where the values of one kind of key lie, by number: compact arrays, no Python object per value.

    Attributes:
        numbers: the sorted numbers of the keys found, or None when they are exactly ``0 .. len - 1``
            (then entry ``j`` is number ``j``: the usual case, and 13 bytes per value).
        offsets: int64 file offset of each value.
        lengths: uint32 length of each value.
        overflow: whether each value fills an overflow run (whose header :meth:`LMDBIndex.value` checks
            together with the value, in the same ``pread``); False for a value inside its leaf page.
    """

    numbers: np.ndarray | None
    offsets: np.ndarray
    lengths: np.ndarray
    overflow: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets)

    def slot(self, number: int) -> int:
        """The entry holding key number ``number``, or -1 when there is none."""
        if self.numbers is None:
            return number if 0 <= number < len(self.offsets) else -1
        k = int(np.searchsorted(self.numbers, number))
        return k if k < len(self.numbers) and int(self.numbers[k]) == number else -1

    def slots(self, numbers: np.ndarray) -> np.ndarray:
        """:meth:`slot` of each of the int64 ``numbers``, as a new int64 array."""
        if self.numbers is None:
            return np.where((numbers >= 0) & (numbers < len(self.offsets)), numbers, -1)
        k = np.searchsorted(self.numbers, numbers)
        inside = k < len(self.numbers)
        hit = inside & (self.numbers[np.where(inside, k, 0)] == numbers) if len(self.numbers) else inside
        return np.where(hit, k, -1).astype(np.int64)


@dataclass(frozen=True)
class LMDBIndex:
    """Where each value of an LMDB file lies, grouped by the kind of its key (see :func:`index_values`).

    ``located[kind]`` holds the values of the keys that ``classify`` gave that kind, by number;
    ``entries`` counts every key of the tree, ``others`` those of no kind.
    """

    page_size: int
    file_size: int
    located: tuple[Located, ...]
    entries: int
    others: int

    def value(self, fd: int, kind: int, number: int, path: str | os.PathLike) -> bytes | None:
        """The value of the key of ``kind`` and ``number`` (None if there is none), read with bounds and header checks.

        Raises:
            CorruptRecordError: the value's overflow pages are not what the tree says.
        """
        located = self.located[kind]
        k = located.slot(number)
        if k < 0:
            return None
        offset, size = int(located.offsets[k]), int(located.lengths[k])
        if not located.overflow[k]:
            data = os.pread(fd, size, offset)
            if len(data) != size:
                raise CorruptRecordError(path, None, "its LMDB file is shorter than it was (changed under the reader?)")
            return data
        overflow = (offset - _PAGE_HEADER) // self.page_size
        raw = os.pread(fd, _PAGE_HEADER + size, offset - _PAGE_HEADER)
        number_read, _pad, flags, count = (
            struct.unpack_from("<QHHI", raw, 0) if len(raw) >= _PAGE_HEADER else (-1, 0, 0, 0)
        )
        if (
            len(raw) != _PAGE_HEADER + size
            or number_read != overflow
            or not flags & _P_OVERFLOW
            or _PAGE_HEADER + size > count * self.page_size
        ):
            raise CorruptRecordError(
                path,
                None,
                f"its LMDB structure is damaged: overflow page {overflow} does not hold the {size}-byte value",
            )
        return raw[_PAGE_HEADER:]


Classify = Callable[[list[bytes]], "tuple[np.ndarray, np.ndarray]"]  # keys -> (kind of each, number of each)


def index_values(fd: int, file_size: int, path: str | os.PathLike, classify: Classify, kinds: int) -> LMDBIndex:
    """Walk the main database of the LMDB file open at ``fd`` and locate every value, checking everything.

    Args:
        fd: a descriptor of the file, open for reading.
        file_size: its size (from ``fstat``).
        path: its name, for error messages.
        classify: every key (in tree order) → the kind of each (an int array, ``range(kinds)``, or -1 for a key of
            no kind: counted in ``others``, not located) and its number (an int64 array).
        kinds: how many kinds ``classify`` gives.

    Raises:
        CorruptRecordError: the file is not an LMDB file of the kind fastdata writes, or its
            structure is damaged (the message says where), or a key of a kind is stored twice.
    """
    return _Walker(fd, file_size, Path(path)).run(classify, kinds)


class _Walker:
    def __init__(self, fd: int, file_size: int, path: Path) -> None:
        self.fd, self.file_size, self.path = fd, file_size, path
        self.page_size = 0
        self.pages = 0

    def fail(self, what: str) -> CorruptRecordError:
        return CorruptRecordError(self.path, None, f"its LMDB structure is damaged: {what}")

    def read(self, offset: int, size: int) -> bytes:
        data = os.pread(self.fd, size, offset)
        if len(data) != size:
            raise self.fail(f"short read at byte {offset} (the file changed or is truncated)")
        return data

    def run(self, classify: Classify, kinds: int) -> LMDBIndex:
        root, depth, entries = self._meta()
        keys: list[bytes] = []
        places: list[int] = []  # offset, length, overflow of each value in turn (dropped once arranged)
        for page, pgno in self._leaves(root, depth) if root is not None else ():
            for offset in self._nodes(page, pgno):
                key, where, size, overflow = self._leaf_value(page, pgno, offset)
                keys.append(key)
                places += (where, size, overflow)
        if len(keys) != entries:
            raise self.fail(f"the tree holds {len(keys)} values, its meta page says {entries}")
        kind, numbers = classify(keys)
        table = np.array(places, dtype=np.int64).reshape(-1, 3)
        located = tuple(self._located(numbers[kind == k], table[kind == k]) for k in range(kinds))
        return LMDBIndex(self.page_size, self.file_size, located, entries, int((kind < 0).sum()))

    def _located(self, numbers: np.ndarray, table: np.ndarray) -> Located:
        """The values of one kind as compact arrays in number order (numbers kept only when not ``0 .. n - 1``)."""
        if len(numbers) > 1 and not bool((numbers[1:] > numbers[:-1]).all()):  # not in key order: sort them
            order = np.argsort(numbers, kind="stable")
            numbers, table = numbers[order], table[order]
            twice = np.flatnonzero(numbers[1:] == numbers[:-1])
            if len(twice):
                raise self.fail(f"key number {int(numbers[twice[0]])} is stored twice")
        whole = len(numbers) == 0 or (int(numbers[0]) == 0 and int(numbers[-1]) == len(numbers) - 1)
        return Located(
            None if whole else numbers.copy(),
            table[:, 0].copy(),
            table[:, 1].astype(np.uint32),
            table[:, 2].astype(np.bool_),
        )

    def _meta(self) -> tuple[int | None, int, int]:
        """The main database's root page, depth and entry count from the newer sound meta page."""
        if self.file_size < 2 * _PAGE_HEADER + _DB_OFFSET:
            raise self.fail(f"{self.file_size} bytes is too short for an LMDB file")
        best = None
        first = self.read(0, _DB_OFFSET + 2 * _DB.size + _TAIL.size)
        page_size = _DB.unpack_from(first, _DB_OFFSET)[0]
        if page_size not in PAGE_SIZES or 2 * page_size > self.file_size:
            raise self.fail(f"page size {page_size} is not one LMDB uses (or the file is shorter than its meta pages)")
        self.page_size, self.pages = page_size, self.file_size // page_size
        for number in (0, 1):
            raw = first if number == 0 else self.read(page_size, len(first))
            pgno, _pad, flags, _lo, _up, magic, version, _addr, _mapsize = _META.unpack_from(raw, 0)
            if pgno != number or not flags & _P_META or magic != _MAGIC or version != _VERSION:
                continue
            main = _DB.unpack_from(raw, _DB_OFFSET + _DB.size)
            last_page, txnid = _TAIL.unpack_from(raw, _DB_OFFSET + 2 * _DB.size)
            if last_page >= self.pages:
                continue  # this meta page describes a longer file: not the one to trust
            if best is None or txnid > best[0]:
                best = (txnid, main)
        if best is None:
            raise self.fail("no sound meta page (not an LMDB file, or its first pages are damaged)")
        _pad, db_flags, depth, _branch, _leaf, _overflow, entries, root = best[1]
        if db_flags & ~0x7F:
            raise self.fail(f"main database flags {db_flags:#x} are not LMDB's")
        if db_flags:
            raise self.fail("its main database uses sorted duplicates or integer keys (not a fastdata shard)")
        if root == (1 << 64) - 1:
            return None, 0, entries
        if not 1 <= depth <= _MAX_DEPTH:
            raise self.fail(f"tree depth {depth} is impossible")
        return root, depth, entries

    def _page(self, pgno: int) -> tuple[bytes, int]:
        if not 2 <= pgno < self.pages:
            raise self.fail(f"page number {pgno} is outside the file's {self.pages} pages")
        page = self.read(pgno * self.page_size, self.page_size)
        number, _pad, flags = struct.unpack_from("<QHH", page, 0)
        if number != pgno:
            raise self.fail(f"page {pgno} says it is page {number}")
        return page, flags

    def _nodes(self, page: bytes, pgno: int) -> list[int]:
        lower, upper = struct.unpack_from("<HH", page, 12)
        if not _PAGE_HEADER <= lower <= upper <= self.page_size or (lower - _PAGE_HEADER) % 2:
            raise self.fail(f"page {pgno} has impossible bounds ({lower}, {upper})")
        count = (lower - _PAGE_HEADER) // 2
        offsets = list(struct.unpack_from(f"<{count}H", page, _PAGE_HEADER))
        for offset in offsets:
            if not upper <= offset <= self.page_size - _NODE_HEADER or offset % 2:
                raise self.fail(f"page {pgno} points at byte {offset} for a node")
        return offsets

    def _leaves(self, root: int, depth: int) -> Iterator[tuple[bytes, int]]:
        """Every leaf page (and its number) in key order, every page checked before it is used."""
        seen: set[int] = set()
        stack = [(root, 1)]
        while stack:
            pgno, level = stack.pop()
            if pgno in seen:
                raise self.fail(f"page {pgno} is reached twice (a cycle in the tree)")
            seen.add(pgno)
            page, flags = self._page(pgno)
            kind = flags & (_P_BRANCH | _P_LEAF | _P_OVERFLOW | _P_META | _P_LEAF2)
            if level < depth:
                if kind != _P_BRANCH:
                    raise self.fail(f"page {pgno} at level {level} of {depth} is not a branch page")
                children = [self._child(page, pgno, offset) for offset in self._nodes(page, pgno)]
                stack.extend((child, level + 1) for child in reversed(children))
            elif kind == _P_LEAF:
                yield page, pgno
            else:
                raise self.fail(f"page {pgno} at the tree's last level {depth} is not a leaf page")

    def _child(self, page: bytes, pgno: int, offset: int) -> int:
        lo, hi, high, key_size = _NODE.unpack_from(page, offset)
        if offset + _NODE_HEADER + key_size > self.page_size:
            raise self.fail(f"a key on page {pgno} runs past the page")
        return lo | hi << 16 | high << 32

    def _leaf_value(self, page: bytes, pgno: int, offset: int) -> tuple[bytes, int, int, bool]:
        lo, hi, flags, key_size = _NODE.unpack_from(page, offset)
        size = lo | hi << 16
        start = offset + _NODE_HEADER + key_size
        if start > self.page_size:
            raise self.fail(f"a key on page {pgno} runs past the page")
        key = page[offset + _NODE_HEADER : start]
        if flags & (_F_SUBDATA | _F_DUPDATA) or flags & ~0x07:
            raise self.fail(f"a node on page {pgno} has flags {flags:#x} (not a fastdata shard)")
        if not flags & _F_BIGDATA:
            if start + size > self.page_size:
                raise self.fail(f"a value on page {pgno} runs past the page ({size} bytes)")
            return key, pgno * self.page_size + start, size, False
        if start + 8 > self.page_size:
            raise self.fail(f"an overflow page number on page {pgno} runs past the page")
        (first,) = struct.unpack_from("<Q", page, start)
        if not first >= 2 or first * self.page_size + _PAGE_HEADER + size > self.file_size:
            raise self.fail(f"a {size}-byte value at overflow page {first} (from page {pgno}) runs past the file")
        return key, first * self.page_size + _PAGE_HEADER, size, True
