"""A packed dataset opened for reading: every file the manifest names is checked before anything is built.

:func:`open_pack` is what :class:`~fastdata.ShardDataset` does with a folder written by
``fastdata pack``, in this order, so a hostile or damaged folder is refused with one line before
any memory is allocated from what it claims:

1. the manifest: a regular file inside the folder, bounded, strict JSON, every field typed;
2. every shard (and index file): inside the folder once symlinks are resolved, a regular file of the
   manifest's size, no more records claimed than its bytes can hold, and as many records as its own
   header says (an LMDB meta page: two page reads); TFRecord indexes are read with a bound and must
   list exactly the manifest's records, inside the shard. So a count is proven by the shards before
   anything of its size is allocated (a pack of sparse files declaring millions of samples is
   refused in a few kilobytes);
3. ``targets.npy``: size and CRC32C as the manifest records them, a header whose shape is the
   manifest's ``num_samples`` (checked before the array is built), labels inside the class table;
4. the manifest again: unchanged while all this was read.

The identity of the manifest (device, inode, size, mtime) and of every shard (device, inode,
mtime) is kept; a process that later opens a shard (a DataLoader worker, say) checks both with
:meth:`OpenedPack.check_current`, so a dataset re-packed under a live reader raises
:class:`DatasetChangedError` instead of mixing the labels of one pack with the images of another.
Shards already open keep reading the files they opened (consistent with the labels read with them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fastdata.formats import get_format
from fastdata.formats.errors import CorruptRecordError, DatasetChangedError
from fastdata.formats.files import FileIdentity, resolve_inside, stat_regular
from fastdata.formats.manifest import MANIFEST_NAME, Manifest
from fastdata.formats.targets import load_targets

__all__ = ["MIN_RECORD_BYTES", "OpenedPack", "open_pack"]

MIN_RECORD_BYTES = 16  # the smallest record either format can store (TFRecord framing alone is 16 bytes)


@dataclass
class OpenedPack:
    """The checked contents of a packed dataset folder (small, picklable: numpy arrays per shard).

    Attributes:
        root: the dataset folder, resolved.
        manifest: the validated manifest.
        targets: int64 label of every sample.
        shard_paths: resolved path of every shard.
        positions: per-sample position in its shard (see ``StorageFormat.positions``).
        sizes: per-sample record size (TFRecord) or 0.
        counts: records per shard.
    """

    root: Path
    manifest: Manifest
    targets: np.ndarray
    shard_paths: np.ndarray
    positions: np.ndarray
    sizes: np.ndarray
    counts: np.ndarray
    manifest_identity: FileIdentity
    shard_identities: np.ndarray  # [num_shards, 3] uint64: device, inode, mtime (ns)

    def check_current(self, shard: int, identity: FileIdentity | None = None) -> None:
        """Raise unless the manifest and shard ``shard`` are still the files this pack was opened from.

        The manifest must be unchanged (device, inode, size, mtime: the packer rewrites it on every
        pack); the shard must be the same file (device, inode: the packer publishes shards by rename)
        and, for TFRecord, unmodified (mtime): a TFRecord record's own CRCs cannot tell a record of
        another image written in its place. An LMDB shard changed in place is left to the per-record
        CRC32Cs of its ``__meta__``, which raise CorruptRecordError.

        Args:
            shard: shard number.
            identity: the identity of the shard file a reader opened (None: stat the path now).

        Raises:
            DatasetChangedError: the manifest or the shard was replaced, changed or removed.
        """
        try:
            now = FileIdentity.of(os.stat(self.root / MANIFEST_NAME))
        except FileNotFoundError:
            raise DatasetChangedError(_changed(self.root, "its manifest.json is gone (a pack is rewriting it?)")) from None
        if now != self.manifest_identity:
            raise DatasetChangedError(_changed(self.root, "its manifest.json was replaced (re-packed?)"))
        if identity is None:
            try:
                identity = FileIdentity.of(os.stat(self.shard_paths[shard]))
            except FileNotFoundError:
                raise DatasetChangedError(_changed(self.root, f"{self.manifest.shards[shard].path} is gone")) from None
        device, inode, mtime = self.shard_identities[shard].tolist()
        if (device, inode) != (identity.device, identity.inode):
            raise DatasetChangedError(_changed(self.root, f"{self.manifest.shards[shard].path} was replaced"))
        if self.manifest.format == "tfrecord" and mtime and mtime != identity.mtime_ns:
            raise DatasetChangedError(_changed(self.root, f"{self.manifest.shards[shard].path} was rewritten in place"))


def open_pack(root: str | os.PathLike, *, shards_here: bool = True) -> OpenedPack:
    """Open and check the packed dataset in ``root`` (see the module docstring for the checks).

    Args:
        root: the dataset folder.
        shards_here: False for the local mirror of a remote dataset (:mod:`fastdata.storage`), whose
            folder holds the manifest, labels and index files but not the shards: the node's shard
            cache checks each shard's size and CRC32C when it downloads it.

    Returns:
        The opened pack.

    Raises:
        FileNotFoundError: no manifest, or a file it names is missing.
        ValueError: the manifest is malformed (one line naming the field), or names an unknown format.
        CorruptRecordError: a file is outside the folder, not a regular file, of the wrong size or
            checksum, or disagrees with the manifest's counts.
        DatasetChangedError: the manifest was replaced while the folder was being opened.
    """
    base = Path(root).resolve()
    before = _identity(base / MANIFEST_NAME)
    manifest = Manifest.load(base)
    storage = get_format(manifest.format)
    paths, identities = [], []
    for shard in manifest.shards:  # O(1) reads per shard first: every count proven before O(samples) memory
        path = _existing(base, shard.path) if shards_here else resolve_inside(base, shard.path)
        if shard.num_samples > shard.nbytes // MIN_RECORD_BYTES:
            raise CorruptRecordError(path, None, f"cannot hold the {shard.num_samples} records the manifest claims")
        st = stat_regular(path, nbytes=shard.nbytes) if shards_here else None
        if shards_here:
            storage.check_count(path, shard)
        paths.append(str(path))
        identities.append((st.st_dev, st.st_ino, st.st_mtime_ns) if st is not None else (0, 0, 0))
    for shard in manifest.shards:  # a missing index is named as a missing shard is, not as a bare [Errno 2]
        if shard.index:
            _existing(base, shard.index)
    located = [storage.positions(base, shard) for shard in manifest.shards]  # TFRecord: bounded index reads
    targets = load_targets(base, manifest, _existing(base, manifest.targets))
    if _identity(base / MANIFEST_NAME) != before:
        raise DatasetChangedError(_changed(base, "its manifest.json was replaced while it was being opened"))
    counts = np.array([s.num_samples for s in manifest.shards], dtype=np.int64)
    pack = OpenedPack(
        root=base, manifest=manifest, targets=targets, shard_paths=np.array(paths, dtype=str),
        positions=_concat([p for p, _ in located]), sizes=_concat([s for _, s in located]), counts=counts,
        manifest_identity=before, shard_identities=np.array(identities, dtype=np.uint64).reshape(-1, 3),
    )
    return pack


def _existing(root: Path, rel: str) -> Path:
    path = resolve_inside(root, rel)
    if not os.path.lexists(path):
        raise FileNotFoundError(f"{rel} (named by the manifest) is missing from {root}: run `fastdata verify {root}`")
    return path


def _identity(path: Path) -> FileIdentity:
    try:
        return FileIdentity.of(os.stat(path))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"no {MANIFEST_NAME} in {str(path.parent)!r}: not a finished fastdata pack "
            "(run `fastdata pack SRC OUT`, or `--resume` an interrupted one)"
        ) from None


def _concat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays).astype(np.int64, copy=False) if arrays else np.zeros(0, np.int64)


def _changed(root: Path, what: str) -> str:
    return (f"the dataset in {root} changed after this ShardDataset opened it: {what}; create a new ShardDataset "
            "(and DataLoader) to read the new files")
