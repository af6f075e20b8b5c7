"""Dataset locations: a local path or a URL (``s3://``, ``gs://``, ``https://``, any fsspec protocol).

Pure string handling, no network and no optional import: ``fastdata.datasets.shard_dataset`` uses it to tell a
remote dataset from a local folder.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.\-]*)://")
#: Protocols with their own client (:mod:`fastdata.storage.s3_store`, :mod:`fastdata.storage.http_store`); every other
#: one goes through fsspec (:mod:`fastdata.storage.fsspec_store`).
NATIVE_SCHEMES = ("s3", "http", "https")


@dataclass(frozen=True)
class Location:
    """A parsed dataset URL.

    Attributes:
        url: the URL without a trailing slash.
        scheme: ``"s3"``, ``"gs"``, ``"https"``, ...
        bucket: the bucket (or host for http/https).
        prefix: the key prefix inside the bucket, without leading or trailing slash (may be empty).
    """

    url: str
    scheme: str
    bucket: str
    prefix: str

    def key(self, rel: str) -> str:
        """The object key of ``rel`` (a path relative to the dataset root)."""
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def child(self, rel: str) -> str:
        """The URL of ``rel`` (a path relative to the dataset root)."""
        return f"{self.url}/{rel}"


def is_url(root: object) -> bool:
    """True when ``root`` is a URL of a remote store (``file://`` URLs and local paths are not)."""
    if not isinstance(root, str):
        return False
    match = _SCHEME.match(root)
    return match is not None and match.group(1).lower() != "file"


def local_path(root: str | os.PathLike) -> Path:
    """``root`` as a local path (a ``file://`` URL loses its scheme)."""
    text = os.fspath(root)
    if isinstance(text, str) and text.lower().startswith("file://"):
        text = text[len("file://") :]
    return Path(text)


def parse_url(url: str) -> Location:
    """Split a dataset URL into scheme, bucket and key prefix.

    Raises:
        ValueError: ``url`` is not a URL, or names no bucket/host.
    """
    match = _SCHEME.match(url) if isinstance(url, str) else None
    if match is None:
        raise ValueError(f"url={url!r} is not a URL: pass e.g. 's3://bucket/dataset' or 'https://host/dataset'")
    scheme = match.group(1).lower()
    rest = url[match.end() :].strip("/")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"url={url!r} names no bucket or host: pass e.g. '{scheme}://bucket/dataset'")
    prefix = prefix.strip("/")
    if ".." in PurePosixPath(prefix).parts:
        raise ValueError(f"url={url!r} contains '..': pass the dataset's URL without relative parts")
    return Location(url=f"{scheme}://{rest}", scheme=scheme, bucket=bucket, prefix=prefix)


def url_id(url: str) -> str:
    """A short, stable folder name for ``url`` (its cache folder): readable tail plus a hash."""
    loc = parse_url(url)
    tail = re.sub(r"[^A-Za-z0-9._-]+", "_", (loc.prefix or loc.bucket).rsplit("/", 1)[-1])[:40]
    return f"{tail}-{hashlib.sha256(loc.url.encode('utf-8')).hexdigest()[:16]}"


def default_cache_dir() -> Path:
    """``$FASTDATA_CACHE``, else ``$XDG_CACHE_HOME/fastdata``, else ``~/.cache/fastdata``."""
    explicit = os.environ.get("FASTDATA_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fastdata"
