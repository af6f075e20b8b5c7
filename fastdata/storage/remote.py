"""Object-store clients: whole and ranged reads, streamed downloads, uploads.

One small :class:`Store` interface, three implementations:

- :class:`S3Store` (``s3://``): boto3. Credentials, region and endpoint come from the standard
  environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``,
  ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3`` for MinIO, R2, moto...), exactly as the AWS CLI reads them.
- :class:`HTTPStore` (``http://``, ``https://``): urllib3, read-only.
- :class:`FsspecStore` (``gs://``, ``az://`` and any other fsspec protocol): the generic fallback.

Clients are created lazily, in the process that uses them, and never inherited across ``fork``
(a store pickles without its client, and a forked child builds its own). A ranged read checks
that the server answered ``206 Partial Content`` with exactly the bytes asked for: a server that
ignores ``Range`` raises :class:`RangeNotSupportedError` instead of being read whole.
"""

from __future__ import annotations

import abc
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

from fastdata.storage.urls import Location, parse_url

logger = logging.getLogger(__name__)

CHUNK = 1 << 20
S3_HINT = "reading s3:// needs boto3: `pip install 'fastdata[s3]'` (or `pip install boto3`)"
FSSPEC_HINT = ("reading {scheme}:// needs fsspec and its driver: `pip install 'fastdata[gcs]'` for gs://, "
               "or `pip install fsspec` plus the package for {scheme}:// (adlfs for az://, ...)")


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
            "dataset from a server with HTTP range support (any object store, nginx, `python -m RangeHTTPServer`)")
    if status != 206 or data_len != length:
        raise RemoteIOError(f"{url}: ranged read returned status {status} with {data_len} of {length} bytes")


_BOTO_LOADER: Any = None  # botocore's model loader, kept so that forked processes skip re-parsing the models


class S3Store(Store):
    """``s3://bucket/prefix`` through boto3 (sync, one client per process)."""

    def _make_client(self) -> Any:
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:
            raise ImportError(S3_HINT) from exc
        import botocore.session

        global _BOTO_LOADER
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        config = Config(retries={"max_attempts": 4, "mode": "standard"}, max_pool_connections=32,
                        connect_timeout=10, read_timeout=60)
        core = botocore.session.get_session()  # a fresh session: credentials, locks and sockets of this process
        if _BOTO_LOADER is not None:  # the parsed service models (plain data) of the parent: 17 ms, not 75 ms, per worker
            core.register_component("data_loader", _BOTO_LOADER)
        client = boto3.session.Session(botocore_session=core).client("s3", region_name=region, config=config)
        _BOTO_LOADER = core.get_component("data_loader")
        return client

    def _call(self, rel: str, method: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        key = self.location.key(rel)
        try:
            return getattr(self.client(), method)(Bucket=self.location.bucket, Key=key, **kwargs)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchKey", "404", "NotFound"):
                raise FileNotFoundError(f"{self.location.child(rel)} does not exist") from None
            raise RemoteIOError(f"{self.location.child(rel)}: {exc}") from exc
        except BotoCoreError as exc:
            raise RemoteIOError(f"{self.location.child(rel)}: {exc}") from exc

    def read(self, rel: str, start: int | None = None, length: int | None = None) -> bytes:
        if start is None:
            return b"".join(self.stream(rel))
        response = self._call(rel, "get_object", Range=f"bytes={start}-{start + length - 1}")
        data = self._body(rel, lambda: response["Body"].read())
        _check_range(self.location.child(rel), response["ResponseMetadata"]["HTTPStatusCode"], len(data), length)
        return data

    def stream(self, rel: str) -> Iterator[bytes]:
        body = self._call(rel, "get_object")["Body"]
        try:
            chunks = body.iter_chunks(CHUNK)
            while True:
                chunk = self._body(rel, lambda: next(chunks, None))
                if chunk is None:
                    return
                yield chunk
        finally:
            body.close()

    def _body(self, rel: str, read: Any) -> Any:
        from botocore.exceptions import BotoCoreError
        from urllib3.exceptions import HTTPError

        try:
            return read()
        except (BotoCoreError, HTTPError, OSError) as exc:
            raise RemoteIOError(f"{self.location.child(rel)}: body ended early or failed ({exc})") from exc

    def size(self, rel: str) -> int | None:
        try:
            return int(self._call(rel, "head_object")["ContentLength"])
        except FileNotFoundError:
            return None
        except RemoteIOError as exc:
            if "404" in str(exc) or "Not Found" in str(exc):
                return None
            raise

    def upload(self, rel: str, path: str | os.PathLike) -> None:
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client().upload_file(os.fspath(path), self.location.bucket, self.location.key(rel))
        except (S3UploadFailedError, BotoCoreError, ClientError) as exc:
            raise RemoteIOError(f"uploading {path} to {self.location.child(rel)} failed: {exc}") from exc

    def put(self, rel: str, data: bytes) -> None:
        self._call(rel, "put_object", Body=data)

    def delete(self, rel: str) -> None:
        self._call(rel, "delete_object")


class HTTPStore(Store):
    """``http(s)://host/path`` through urllib3; read-only. Ranged reads must be answered with 206."""

    def _make_client(self) -> Any:
        import urllib3

        retries = urllib3.Retry(total=4, backoff_factor=0.2, status_forcelist=(500, 502, 503, 504),
                                allowed_methods=("GET", "HEAD"))
        return urllib3.PoolManager(num_pools=4, maxsize=32, retries=retries,
                                   timeout=urllib3.Timeout(connect=10, read=60))

    def _request(self, method: str, rel: str, headers: dict[str, str] | None = None, preload: bool = True) -> Any:
        from urllib3.exceptions import HTTPError

        url = self.location.child(rel)
        try:
            response = self.client().request(method, url, headers=headers, preload_content=preload)
        except HTTPError as exc:
            raise RemoteIOError(f"{url}: {exc}") from exc
        if response.status == 404:
            response.release_conn()
            raise FileNotFoundError(f"{url} does not exist")
        if response.status not in (200, 206):
            response.release_conn()
            raise RemoteIOError(f"{url}: HTTP {response.status}")
        return response

    def read(self, rel: str, start: int | None = None, length: int | None = None) -> bytes:
        if start is None:
            return b"".join(self.stream(rel))
        from urllib3.exceptions import HTTPError

        response = self._request("GET", rel, {"Range": f"bytes={start}-{start + length - 1}"}, preload=False)
        try:
            if response.status == 200:  # do not read a whole object that was meant to be a slice
                _check_range(self.location.child(rel), 200, 0, length)
            data = response.read()
        except HTTPError as exc:
            raise RemoteIOError(f"{self.location.child(rel)}: body ended early or failed ({exc})") from exc
        finally:
            response.release_conn()
        _check_range(self.location.child(rel), response.status, len(data), length)
        return data

    def stream(self, rel: str) -> Iterator[bytes]:
        from urllib3.exceptions import HTTPError

        response = self._request("GET", rel, preload=False)
        try:
            yield from response.stream(CHUNK)  # urllib3 raises when the body is shorter than Content-Length
        except HTTPError as exc:
            raise RemoteIOError(f"{self.location.child(rel)}: body ended early or failed ({exc})") from exc
        finally:
            response.release_conn()

    def size(self, rel: str) -> int | None:
        try:
            response = self._request("HEAD", rel)
        except FileNotFoundError:
            return None
        length = response.headers.get("Content-Length")
        return int(length) if length is not None else None


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

    def read(self, rel: str, start: int | None = None, length: int | None = None) -> bytes:
        if start is None:
            return self._wrap(rel, lambda: self.client().cat_file(self._path(rel)))
        data = self._wrap(rel, lambda: self.client().cat_file(self._path(rel), start=start, end=start + length))
        if len(data) != length:
            raise RemoteIOError(f"{self.location.child(rel)}: ranged read returned {len(data)} of {length} bytes")
        return data

    def stream(self, rel: str) -> Iterator[bytes]:
        f = self._wrap(rel, lambda: self.client().open(self._path(rel), "rb", block_size=CHUNK * 8))
        try:
            while chunk := self._wrap(rel, lambda: f.read(CHUNK)):
                yield chunk
        finally:
            f.close()

    def size(self, rel: str) -> int | None:
        try:
            return int(self._wrap(rel, lambda: self.client().size(self._path(rel))))
        except FileNotFoundError:
            return None

    def upload(self, rel: str, path: str | os.PathLike) -> None:
        self._wrap(rel, lambda: self.client().put_file(os.fspath(path), self._path(rel)))

    def put(self, rel: str, data: bytes) -> None:
        self._wrap(rel, lambda: self.client().pipe_file(self._path(rel), data))

    def delete(self, rel: str) -> None:
        try:
            self._wrap(rel, lambda: self.client().rm_file(self._path(rel)))
        except FileNotFoundError:
            pass


_STORES: dict[str, Store] = {}
_STORES_LOCK = threading.Lock()
os.register_at_fork(before=_STORES_LOCK.acquire, after_in_parent=_STORES_LOCK.release,
                    after_in_child=_STORES_LOCK.release)


def get_store(url: str) -> Store:
    """The store for the dataset at ``url`` (one per URL per process; clients are made on first use).

    Raises:
        ValueError: ``url`` is not a URL.
    """
    loc = parse_url(url)
    with _STORES_LOCK:
        store = _STORES.get(loc.url)
        if store is None:
            kind = {"s3": S3Store, "http": HTTPStore, "https": HTTPStore}.get(loc.scheme, FsspecStore)
            store = _STORES[loc.url] = kind(loc.url)
        return store
