"""Any other protocol through fsspec.

Any other protocol through fsspec (:class:`FsspecStore`): ``gs://`` with gcsfs, ``az://`` with adlfs,
``memory://``..., the generic fallback; a missing fsspec or driver is an ImportError saying what to install.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from typing_extensions import override

from fastdata.storage.store import CHUNK, RemoteIOError, Store

FSSPEC_HINT = (
    "reading {scheme}:// needs fsspec and its driver: `pip install 'fastdata[gcs]'` for gs://, "
    "or `pip install fsspec` plus the package for {scheme}:// (adlfs for az://, ...)"
)


class FsspecStore(Store):
    """Any fsspec protocol (``gs://`` with gcsfs, ``az://`` with adlfs, ``memory://``...)."""

    def _make_client(self) -> Any:
        try:
            import fsspec
        except ImportError as exc:
            raise ImportError(FSSPEC_HINT.format(scheme=self.location.scheme)) from exc
        try:
            return fsspec.filesystem(self.location.scheme, skip_instance_cache=True)
        except (ImportError, ValueError) as exc:
            raise ImportError(f"{FSSPEC_HINT.format(scheme=self.location.scheme)} ({exc})") from exc

    def _path(self, rel: str) -> str:
        return f"{self.location.bucket}/{self.location.key(rel)}"

    def _wrap(self, rel: str, call: Any) -> Any:
        try:
            return call()
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.location.child(rel)} does not exist") from None
        except OSError as exc:
            raise RemoteIOError(f"{self.location.child(rel)}: {exc}") from exc

    @override
    def read(self, rel: str, start: int | None = None, length: int | None = None) -> bytes:
        if start is None:
            return self._wrap(rel, lambda: self.client().cat_file(self._path(rel)))
        if length is None:
            raise ValueError(f"{self.location.child(rel)}: a ranged read needs a length with its start")
        data = self._wrap(rel, lambda: self.client().cat_file(self._path(rel), start=start, end=start + length))
        if len(data) != length:
            raise RemoteIOError(f"{self.location.child(rel)}: ranged read returned {len(data)} of {length} bytes")
        return data

    @override
    def stream(self, rel: str) -> Iterator[bytes]:
        f = self._wrap(rel, lambda: self.client().open(self._path(rel), "rb", block_size=CHUNK * 8))
        try:
            while chunk := self._wrap(rel, lambda: f.read(CHUNK)):
                yield chunk
        finally:
            f.close()

    @override
    def size(self, rel: str) -> int | None:
        try:
            return int(self._wrap(rel, lambda: self.client().size(self._path(rel))))
        except FileNotFoundError:
            return None

    @override
    def upload(self, rel: str, path: str | os.PathLike) -> None:
        self._wrap(rel, lambda: self.client().put_file(os.fspath(path), self._path(rel)))

    @override
    def put(self, rel: str, data: bytes) -> None:
        self._wrap(rel, lambda: self.client().pipe_file(self._path(rel), data))

    @override
    def delete(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._wrap(rel, lambda: self.client().rm_file(self._path(rel)))
