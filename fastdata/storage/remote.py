"""Object-store clients: :func:`get_store`, the one store per dataset URL per process.

The :class:`~fastdata.storage.store.Store` interface (:mod:`~fastdata.storage.store`), three implementations:

- :class:`~fastdata.storage.s3_store.S3Store` (``s3://``): boto3. Credentials, region and endpoint come from the
  standard environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``,
  ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3`` for MinIO, R2, moto...), exactly as the AWS CLI reads them.
- :class:`~fastdata.storage.http_store.HTTPStore` (``http://``, ``https://``): urllib3, read-only.
- :class:`~fastdata.storage.fsspec_store.FsspecStore` (``gs://``, ``az://`` and any other fsspec protocol): the
  generic fallback.

Clients are created lazily, in the process that uses them, and never inherited across ``fork``
(a store pickles without its client, and a forked child builds its own). A ranged read checks
that the server answered ``206 Partial Content`` with exactly the bytes asked for: a server that
ignores ``Range`` raises :class:`~fastdata.storage.store.RangeNotSupportedError` instead of being read whole.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from fastdata.storage.fsspec_store import FsspecStore
from fastdata.storage.http_store import HTTPStore
from fastdata.storage.s3_store import S3Store
from fastdata.storage.store import Store
from fastdata.storage.urls import parse_url

_STORES: dict[str, Store] = {}
_STORES_LOCK = threading.Lock()
os.register_at_fork(
    before=_STORES_LOCK.acquire, after_in_parent=_STORES_LOCK.release, after_in_child=_STORES_LOCK.release
)


def get_store(url: str) -> Store:
    """The store for the dataset at ``url`` (one per URL per process; clients are made on first use).

    Raises:
        ValueError: ``url`` is not a URL.
    """
    loc = parse_url(url)
    with _STORES_LOCK:
        store = _STORES.get(loc.url)
        if store is None:
            kind: Callable[[str], Store] = {"s3": S3Store, "http": HTTPStore, "https": HTTPStore}.get(
                loc.scheme, FsspecStore
            )
            store = _STORES[loc.url] = kind(loc.url)
        return store
