"""LMDB shards: one single-file LMDB environment per shard.

Sample ``j`` of a shard is stored under the key ``f"{j:08d}".encode()`` with the encoded image
bytes as value. The key ``__meta__`` holds a UTF-8 JSON object with the shard's per-sample
``labels``, ``filenames``, ``heights``, ``widths``, ``formats``, ``crc32c`` (of each image's bytes)
and ``num_samples``, so a plain
``lmdb`` reader can get every image and label without fastdata and without pickle.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import google_crc32c
import lmdb
import numpy as np

from fastdata._fs import file_crc32c, publish, tmp_path
from fastdata.formats.base import CorruptRecordError, ShardReaderBase, ShardWriterBase, StorageFormat
from fastdata.formats.example import ImageRecord
from fastdata.formats.manifest import ShardInfo

META_KEY = b"__meta__"
_MAP_SIZE = 1 << 40  # address space only; the file grows with the data


def sample_key(j: int) -> bytes:
    """The key of sample ``j`` within its shard."""
    return f"{j:08d}".encode()


class LMDBShardWriter(ShardWriterBase):
    """Appends records to a new single-file LMDB environment under a temporary name."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._tmp = tmp_path(self.path)
        self._env = lmdb.open(str(self._tmp), subdir=False, map_size=_MAP_SIZE, lock=False, sync=False, meminit=True)
        self._txn = self._env.begin(write=True)
        self._meta: dict[str, list] = {
            k: [] for k in ("labels", "filenames", "heights", "widths", "formats", "crc32c")
        }

    def write(self, record: ImageRecord) -> int:
        if not self._txn.put(sample_key(self.num_samples), record.image, append=True):
            raise RuntimeError(f"could not append sample {self.num_samples} to {self._tmp}")
        for key, value in zip(
            self._meta, (
                record.label,
                record.filename,
                record.height,
                record.width,
                record.image_format,
                google_crc32c.value(record.image),
            )
        ):
            self._meta[key].append(value)
        self.num_samples += 1
        return len(record.image) + 8

    def close(self, root: Path) -> ShardInfo:
        meta = dict(self._meta, num_samples=self.num_samples)
        self._txn.put(META_KEY, json.dumps(meta, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
        self._txn.commit()
        self._env.sync(True)
        self._env.close()
        publish(self._tmp, self.path)
        return ShardInfo(
            path=self.path.relative_to(root).as_posix(),
            num_samples=self.num_samples,
            nbytes=self.path.stat().st_size,
            crc32c=file_crc32c(self.path),
        )

    def abort(self) -> None:
        try:
            self._txn.abort()
            self._env.close()
        finally:
            self._tmp.unlink(missing_ok=True)


def open_readonly(path: str | os.PathLike) -> lmdb.Environment:
    """Open a shard for reading: readonly, no lock file, kernel readahead on.

    A record (an encoded image, ~100 KB) spans dozens of pages; with readahead the kernel reads
    them in a few large requests. Measured on a cold page cache, 10k ImageNet-like images:
    305 img/s with ``readahead=False`` against 563 img/s with it on.
    """
    return lmdb.open(
        str(path), subdir=False, readonly=True, lock=False, readahead=True, meminit=False, max_readers=1024
    )


_SHARED: dict[tuple, lmdb.Environment] = {}
_SHARED_PID = os.getpid()
_SHARED_LOCK = threading.Lock()


def shared_env(path: str | os.PathLike) -> lmdb.Environment:
    """This process's one read-only environment for ``path``.

    py-lmdb refuses to open the same file twice in a process, so every reader of a shard in a
    process shares one environment. The key includes the inode and mtime, so a shard replaced
    by a new pack is opened afresh; after a fork the child never uses the parent's handles.
    """
    global _SHARED_PID
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_ino, st.st_mtime_ns, st.st_size)
    with _SHARED_LOCK:
        if _SHARED_PID != os.getpid():
            _SHARED.clear()  # handles inherited through fork belong to the parent
            _SHARED_PID = os.getpid()
        env = _SHARED.get(key)
        if env is None:
            stale = [k for k in _SHARED if k[0] == key[0]]
            for k in stale:
                _SHARED.pop(k).close()
            env = _SHARED[key] = open_readonly(path)
        return env


def close_shared(path: str | os.PathLike) -> None:
    """Close this process's shared environment of ``path``, if open (its file is about to be deleted or replaced)."""
    real = os.path.realpath(path)
    with _SHARED_LOCK:
        if _SHARED_PID != os.getpid():
            return
        for key in [k for k in _SHARED if k[0] == real]:
            _SHARED.pop(key).close()


def read_meta(env: lmdb.Environment, path: str | os.PathLike) -> dict:
    """The shard's ``__meta__`` JSON object."""
    with env.begin(buffers=False) as txn:
        raw = txn.get(META_KEY)
    if raw is None:
        raise CorruptRecordError(path, -1, "no __meta__ entry (not a fastdata LMDB shard, or an unfinished one)")
    return json.loads(raw.decode("utf-8"))


def _check_records(
    env: lmdb.Environment, path: Path, meta: dict, on_image: Callable[[int, bytes], None] | None
) -> list[str]:
    """Compare each record's bytes with the CRC32C stored for it in ``__meta__``; pass sound ones to ``on_image``."""
    problems = []
    with env.begin(buffers=True) as txn:
        for j, expected in enumerate(meta.get("crc32c", [])):
            value = txn.get(sample_key(j))
            if value is None:
                problems.append(f"record {j}: {CorruptRecordError(path, j, 'key is missing')}")
            elif google_crc32c.value(bytes(value)) != expected:
                problems.append(f"record {j}: {CorruptRecordError(path, j, 'image bytes CRC mismatch')}")
            elif on_image is not None:
                on_image(j, bytes(value))
    return problems


class LMDBShardReader(ShardReaderBase):
    """Key lookups in one shard; ``position`` is the record number within the shard."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._env = shared_env(self.path)

    def read(self, position: int, size: int) -> tuple[bytes, int | None]:
        with self._env.begin(buffers=False) as txn:
            value = txn.get(sample_key(position))
        if value is None:
            raise CorruptRecordError(self.path, position, f"key {sample_key(position).decode()} is missing")
        return value, None

    def close(self) -> None:
        self._env = None  # the environment is shared in this process; it stays open for other readers


class LMDBFormat(StorageFormat):
    """Single-file LMDB environments, one per shard."""

    name = "lmdb"
    suffix = ".lmdb"

    def writer(self, path: Path) -> LMDBShardWriter:
        return LMDBShardWriter(path)

    def reader(self, path: Path) -> LMDBShardReader:
        return LMDBShardReader(path)

    def positions(self, root: Path, shard: ShardInfo) -> tuple[np.ndarray, np.ndarray]:
        n = shard.num_samples
        return np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64)

    def verify(self, root: Path, shard: ShardInfo, on_image: Callable[[int, bytes], None] | None = None) -> list[str]:
        path = root / shard.path
        problems: list[str] = []
        try:
            env = shared_env(path)
        except lmdb.Error as exc:
            return problems + [f"{shard.path}: not a readable LMDB file ({exc})"]
        try:
            meta = read_meta(env, path)
            with env.begin() as txn:
                count = txn.stat()["entries"] - 1
            if meta.get("num_samples") != shard.num_samples or count != shard.num_samples:
                problems.append(f"{shard.path}: holds {count} records, the manifest says {shard.num_samples}")
            problems += _check_records(env, path, meta, on_image)
        except (lmdb.Error, CorruptRecordError, ValueError) as exc:
            problems.append(f"{shard.path}: {exc}")
        return problems
