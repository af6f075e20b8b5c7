"""Datasets on object storage (``s3://``, ``gs://``, ``https://``, any fsspec URL) through a node-local shard cache.

- :mod:`~fastdata.storage.urls`: local path or URL, bucket and prefix, the default cache folder.
- :mod:`~fastdata.storage.store`: the :class:`Store` interface, its errors, the 206 check of ranged reads.
- :mod:`~fastdata.storage.s3_store`, :mod:`~fastdata.storage.http_store`, :mod:`~fastdata.storage.fsspec_store`:
  the clients (boto3 for S3, urllib3 for HTTP, fsspec otherwise), made lazily in each process.
- :mod:`~fastdata.storage.remote`: :func:`get_store`, one store per dataset URL per process.
- :mod:`~fastdata.storage.fileobj`: one object as a Python file, streamed or by ranged reads (pack sources at URLs).
- :mod:`~fastdata.storage.locks`: ``flock`` locks shared by the node's processes, safe across fork.
- :mod:`~fastdata.storage.cache`: :class:`ShardCache`, one checked download per shard per node.
- :mod:`~fastdata.storage.budget`: the cache's byte budget, furthest-next-use eviction.
- :mod:`~fastdata.storage.pass_plan`: which shard each upcoming sample of a pass needs, and when.
- :mod:`~fastdata.storage.prefetch`: downloads ahead of the loader, in the order it will read.
- :mod:`~fastdata.storage.plans`: each planning process's next use of every shard, for eviction.
- :mod:`~fastdata.storage.shards`: :class:`RemoteShards`, what ``ShardDataset`` reads a URL through.
- :mod:`~fastdata.storage.transfer`: ``pack`` to a URL (upload as shards complete, manifest last)
  and the remote side of ``inspect`` / ``verify``.
- :mod:`~fastdata.storage.trace`: an optional event log (``FASTDATA_CACHE_TRACE``).

No cloud SDK is imported until a remote dataset is opened.
"""

from fastdata.storage.cache import DownloadError, ShardCache, minimum_budget
from fastdata.storage.remote import get_store
from fastdata.storage.shards import RemoteShards
from fastdata.storage.store import RangeNotSupportedError, RemoteIOError
from fastdata.storage.urls import default_cache_dir, is_url, parse_url

__all__ = [
    "DownloadError",
    "RangeNotSupportedError",
    "RemoteIOError",
    "RemoteShards",
    "ShardCache",
    "default_cache_dir",
    "get_store",
    "is_url",
    "minimum_budget",
    "parse_url",
]
