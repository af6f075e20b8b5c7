"""The ``Store`` interface every object-store client implements.

The :class:`Store` interface every object-store client implements (whole and ranged reads, streamed downloads,
uploads; a client made lazily in each process and never inherited across ``fork``), the errors a store raises, and
the check that a ranged read was answered ``206 Partial Content`` with exactly the bytes asked for.
"""

from __future__ import annotations

import abc
import os
import threading
from collections.abc import Iterator
from typing import Any

from fastdata.storage.urls import Location, parse_url

CHUNK = 1 << 20


class RemoteIOError(ConnectionError):
    """A request to the object store failed (after the client's own retries)."""


class RangeNotSupportedError(RemoteIOError):
    """The server ignored an HTTP ``Range`` request (answered 200 with the whole object instead of 206)."""


class Store(abc.ABC):
    """The objects under one dataset URL; paths are relative to it (``"shard-00000.tfrecord"``)."""

    def __init__(self, url: str) -> None:
        self.location: Location = parse_url(url)
        self.url = self.location.url
        self._pid = -1
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        """This process's client, created on first use (again after a fork)."""
        if self._pid != os.getpid():
            self._lock = threading.Lock()  # a forked copy of the lock may be held by a thread that is gone
        if self._pid != os.getpid() or self._client is None:
            with self._lock:
                if self._pid != os.getpid() or self._client is None:
                    self._client = self._make_client()
                    self._pid = os.getpid()
        return self._client

    @abc.abstractmethod
    def _make_client(self) -> Any:
        """Build the client (imports the SDK)."""

    @abc.abstractmethod
    def read(self, rel: str, start: int | None = None, length: int | None = None) -> bytes:
        """The whole object, or ``length`` bytes from ``start`` (one ranged GET answered with 206).

        Raises:
            FileNotFoundError: no such object.
            RangeNotSupportedError: the server ignored the range.
            RemoteIOError: the request failed or returned fewer bytes than asked for.
        """

    @abc.abstractmethod
    def stream(self, rel: str) -> Iterator[bytes]:
        """The object's bytes in chunks (one GET).

        Raises:
            FileNotFoundError: no such object.
            RemoteIOError: the request failed, or the body ended early.
        """

    @abc.abstractmethod
    def size(self, rel: str) -> int | None:
        """The object's size in bytes, or None when it does not exist."""

    def upload(self, rel: str, path: str | os.PathLike) -> None:
        """Upload a local file to ``rel`` (replacing it).

        Raises:
            ValueError: the store is read-only (http/https).
        """
        raise ValueError(f"{self.url} is read-only ({self.location.scheme}://): pack to s3://, gs:// or a local folder")

    def put(self, rel: str, data: bytes) -> None:
        """Write ``data`` to ``rel`` (replacing it)."""
        raise ValueError(f"{self.url} is read-only ({self.location.scheme}://): pack to s3://, gs:// or a local folder")

    def delete(self, rel: str) -> None:
        """Remove ``rel`` (no error when it does not exist)."""
        raise ValueError(f"{self.url} is read-only ({self.location.scheme}://): pack to s3://, gs:// or a local folder")

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_client=None, _pid=-1, _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


def _check_range(url: str, status: int, data_len: int, length: int) -> None:
    if status == 200:
        raise RangeNotSupportedError(
            f"{url}: the server ignored the Range header (200 with the whole object instead of 206): serve the "
            "dataset from a server with HTTP range support (any object store, nginx, `python -m RangeHTTPServer`)"
        )
    if status != 206 or data_len != length:
        raise RemoteIOError(f"{url}: ranged read returned status {status} with {data_len} of {length} bytes")
