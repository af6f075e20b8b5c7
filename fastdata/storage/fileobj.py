"""One object at a URL as a Python file: streamed front to back, or seekable by ranged reads.

What a pack source reads at a URL (a ``.csv``/``.jsonl``/``.parquet`` list, a WebDataset tar) is read
through :mod:`fastdata.storage.remote` without being held whole in memory: a list or a tar is streamed
(:func:`open_stream`, one GET), a Parquet file is read by ranges (:func:`open_ranged`: the footer, then one
row group's columns at a time).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from fastdata.storage.remote import get_store
from fastdata.storage.store import RemoteIOError, Store

BUFFER = 1 << 20  # bytes a ranged file reads at a time


def split_url(url: str) -> tuple[Store, str]:
    """The store of ``url``'s folder and the object's name in it.

    Raises:
        ValueError: ``url`` is not a URL.
    """
    parent, _, name = url.rstrip("/").rpartition("/")
    return get_store(parent), name


def url_size(url: str) -> int | None:
    """The size of the object at ``url``, or None when there is none."""
    store, name = split_url(url)
    return store.size(name)


class _StreamIO(io.RawIOBase):
    """The chunks of one GET as a readable raw file."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            try:
                self._left = next(self._chunks)
            except StopIteration:
                return 0
            except ConnectionError as exc:
                raise OSError(str(exc)) from exc
        n = min(len(buffer), len(self._left))
        buffer[:n] = self._left[:n]
        self._left = self._left[n:]
        return n

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()  # releases the connection of a body not read to the end
        super().close()


class _RangedIO(io.RawIOBase):
    """An object of known size as a seekable raw file: every read is one ranged GET."""

    def __init__(self, store: Store, name: str, size: int) -> None:
        self._store, self._name, self._size, self._pos = store, name, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self._size - self._pos)
        if n <= 0:
            return 0
        try:
            data = self._store.read(self._name, self._pos, n)
        except ConnectionError as exc:
            raise OSError(str(exc)) from exc
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)


def open_stream(url: str) -> io.BufferedReader:
    """The object at ``url`` as a binary file read front to back in one GET (close it to release the connection).

    Raises:
        FileNotFoundError: no object there.
        OSError: the request failed.
    """
    store, name = split_url(url)
    chunks = store.stream(name)
    try:
        first = next(chunks, b"")  # the GET happens here, so a missing object is told now
    except RemoteIOError as exc:
        raise OSError(str(exc)) from exc
    return io.BufferedReader(_StreamIO(_prepend(first, chunks)), BUFFER)


def open_ranged(url: str) -> io.BufferedReader:
    """The object at ``url`` as a seekable binary file of ranged reads (for Parquet's footer and row groups).

    Raises:
        FileNotFoundError: no object there.
    """
    store, name = split_url(url)
    size = store.size(name)
    if size is None:
        raise FileNotFoundError(f"{url} does not exist")
    return io.BufferedReader(_RangedIO(store, name, size), BUFFER)


def _prepend(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    try:
        if first:
            yield first
        yield from rest
    finally:
        close = getattr(rest, "close", None)
        if close is not None:
            close()
