"""Moving whole datasets to and from object stores.

Moving whole datasets: ``pack`` to a URL, ``upload`` a local pack, and the local view ``inspect`` / ``verify``
use for a URL.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import google_crc32c

from fastdata.formats.manifest import MANIFEST_NAME, Manifest
from fastdata.formats.manifest_entries import ShardInfo
from fastdata.storage.remote import get_store
from fastdata.storage.shards import fetch_manifest, mirror_metadata
from fastdata.storage.store import Store
from fastdata.storage.urls import is_url, local_path

logger = logging.getLogger(__name__)

UPLOADS_AT_ONCE = 4


class _Uploader:
    """Uploads each finished shard (and its index) in the background, then drops the staged copy."""

    def __init__(self, store: Store, staging: Path, *, keep: bool = False) -> None:
        self.store = store
        self.staging = staging
        self.keep = keep  # keep the local files (an upload of a finished pack)
        self.pool = ThreadPoolExecutor(UPLOADS_AT_ONCE, thread_name_prefix="fastdata-upload")
        self.futures: list[Future] = []

    def __call__(self, shard: ShardInfo) -> None:
        for future in [f for f in self.futures if f.done()]:
            future.result()  # the first failed upload stops the pack
        self.futures.append(self.pool.submit(self._upload, shard))

    def _upload(self, shard: ShardInfo) -> None:
        if shard.index:  # the index first: a reader never finds a shard without its index
            self.store.upload(shard.index, self.staging / shard.index)
        self.store.upload(shard.path, self.staging / shard.path)
        if not self.keep:
            (self.staging / shard.path).unlink(missing_ok=True)  # keep the local disk use to a few shards

    def wait(self) -> None:
        try:
            for future in self.futures:
                future.result()
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)


def pack_to_url(
    src: str | os.PathLike,
    url: str,
    *,
    pack_local: Callable[..., Manifest],
    resume: bool = False,
    overwrite: bool = False,
    **options: Any,
) -> Manifest:
    """Pack ``src`` into a local staging folder, uploading shards as they complete and ``manifest.json`` last.

    A dataset at ``url`` is complete exactly when its manifest exists. With ``overwrite`` the old
    manifest is deleted first (readers never see a half-replaced dataset), and objects of the old
    dataset that the new one does not use are deleted after the new manifest is in place.

    Args:
        src: image folder (ImageFolder layout).
        url: destination, e.g. ``s3://bucket/imagenet-shards``.
        pack_local: :func:`fastdata.pack` (passed in by it: storage sits below packing and does not import it).
        resume: not supported for URLs (raises).
        overwrite: replace a dataset already at ``url``.
        **options: the other keywords of :func:`fastdata.pack`.

    Returns:
        The uploaded manifest.

    Raises:
        FileExistsError: ``url`` holds a dataset and ``overwrite`` is not set.
        ValueError: ``resume`` was asked for, or the store is read-only (http/https).
        RemoteIOError: an upload failed.
    """
    if resume:
        raise ValueError(
            f"resume is not supported when packing to a URL ({url}): pack again with overwrite "
            "(--overwrite), or pack to a local folder with --resume and upload it"
        )
    store = get_store(url)
    old = _take_down(store, overwrite)
    staging = Path(tempfile.mkdtemp(prefix="fastdata-pack-"))
    uploader = _Uploader(store, staging)
    try:
        try:
            manifest = pack_local(src, staging, on_shard=uploader, **options)
        finally:
            uploader.wait()
        for rel in manifest.side_files:
            store.upload(rel, staging / rel)
        store.upload(MANIFEST_NAME, staging / MANIFEST_NAME)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if old is not None:
        _delete_unused(store, old, manifest)
    logger.info("uploaded %d shards to %s", len(manifest.shards), store.url)
    return manifest


def upload(root: str | os.PathLike, url: str, *, overwrite: bool = False) -> Manifest:
    """Upload a dataset packed in a local folder to ``url``: shards with their indexes, labels, ``manifest.json`` last.

    Args:
        root: a folder written by ``fastdata pack``.
        url: destination, e.g. ``s3://bucket/imagenet-shards``.
        overwrite: replace a dataset already at ``url`` (as :func:`pack_to_url` does).

    Returns:
        The uploaded manifest.

    Raises:
        FileNotFoundError: ``root`` holds no finished pack.
        FileExistsError: ``url`` holds a dataset and ``overwrite`` is not set.
        RemoteIOError: an upload failed.
    """
    root = local_path(root)
    manifest = Manifest.load(root)
    store = get_store(url)
    old = _take_down(store, overwrite)
    uploader = _Uploader(store, root, keep=True)
    for shard in manifest.shards:
        uploader(shard)
    uploader.wait()
    for rel in manifest.side_files:
        store.upload(rel, root / rel)
    store.upload(MANIFEST_NAME, root / MANIFEST_NAME)
    if old is not None:
        _delete_unused(store, old, manifest)
    return manifest


def _take_down(store: Store, overwrite: bool) -> Manifest | None:
    """Delete the manifest of a dataset already at the store (when ``overwrite``); return it."""
    if store.size(MANIFEST_NAME) is None:
        return None
    if not overwrite:
        raise FileExistsError(f"{store.url} already holds a dataset: pass --overwrite to replace it")
    old = fetch_manifest(store)[0]
    store.delete(MANIFEST_NAME)  # from here on, readers see no dataset rather than a half-replaced one
    return old


def _delete_unused(store: Store, old: Manifest, new: Manifest) -> None:
    keep = {*new.side_files} | {s.path for s in new.shards} | {s.index for s in new.shards if s.index}
    stale = ({*old.side_files} | {s.path for s in old.shards} | {s.index for s in old.shards if s.index}) - keep
    for rel in sorted(stale):
        store.delete(rel)


class CheckSource:
    """What ``describe`` and ``verify`` read: a local dataset folder, or a URL mirrored one shard at a time.

    For a URL, the manifest, labels and index files are downloaded into a temporary folder
    (:attr:`root`), and :meth:`fetch` downloads one shard there; :meth:`drop` deletes it again.
    The temporary folder is removed when the object is garbage-collected (or by :meth:`close`).
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.name = str(root)
        self.store: Store | None = None
        self._tmp: tempfile.TemporaryDirectory | None = None
        if is_url(root):
            self.store = get_store(str(root))
            self._tmp = tempfile.TemporaryDirectory(prefix="fastdata-check-")
            self.root = mirror_metadata(self.store, Path(self._tmp.name))[1]
        else:
            self.root = local_path(root)

    def fetch(self, shard: ShardInfo) -> bool:
        """Make ``root / shard.path`` available; False when the shard does not exist.

        A remote shard whose bytes do not match the manifest's CRC32C is downloaded once more (a
        transfer error is not damage); what is then on disk is what verify judges.
        """
        path = self.root / shard.path
        if self.store is None:  # something there that is not a regular file (a folder, a socket) is damage, not absence
            return os.path.lexists(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            crc = google_crc32c.Checksum()
            try:
                with open(path, "wb") as f:
                    for chunk in self.store.stream(shard.path):
                        f.write(chunk)
                        crc.update(chunk)
            except FileNotFoundError:
                return False
            if crc.hexdigest().decode() == shard.crc32c:
                break
        return True

    def drop(self, shard: ShardInfo) -> None:
        """Delete the downloaded copy of a remote shard (a no-op for local datasets)."""
        if self.store is not None:
            (self.root / shard.path).unlink(missing_ok=True)

    def close(self) -> None:
        """Remove the downloaded copy, if any (idempotent)."""
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
