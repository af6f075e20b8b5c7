"""A packed dataset opened for reading: every file the manifest names is checked before anything is built.

:func:`open_pack` is what :class:`~fastdata.ShardDataset` does with a folder written by
``fastdata pack``, in this order, so a hostile or damaged folder is refused with one line before
any memory is allocated from what it claims, and in time that does not grow with the shards beyond
one ``lstat`` each:

1. the manifest: a regular file inside the folder, bounded, strict JSON, every field typed;
2. every shard: inside the folder once symlinks are resolved, a regular file of the manifest's size
   that can hold the records the manifest claims (and, for TFRecord, an index of the recorded size
   that can list them). Nothing else of a shard is read here: its own count (an LMDB ``.loc`` sidecar, or meta page and
   ``__meta__``, a TFRecord ``.idx`` read with a bound and checked against the manifest and the
   shard) is checked when a process first reads the shard (:meth:`OpenedPack.locate`, the format's
   reader), and a mismatch is a :class:`CorruptRecordError` naming the file then;
3. ``targets.npy``: size and CRC32C as the manifest records them, a header whose shape is the
   manifest's ``num_samples`` (checked before anything is mapped), labels inside the class table,
   all in one pass of bounded memory; then mapped read-only (:class:`~fastdata.formats.targets.MappedTargets`),
   so every process shares its pages;
4. the manifest again: unchanged while all this was read.

Nothing per sample is kept: the labels file stays open (a reader takes one shard's labels at a time), and a
record's place in its shard comes from the shard itself when it is first read (LMDB: its number or ``.loc``
sidecar; TFRecord: its ``.idx``). A reader's pack (``compact=True``) keeps the shard list as columns
(:class:`~fastdata.formats.shard_table.ShardTable`) and pickles in a few hundred bytes whatever the number of
shards: the manifest's identity, a digest of every shard's identity, and the labels file's. Unpickling (a spawn or
forkserver worker) reads the manifest again and ``lstat``s every shard again, as opening did, and uses them only if
they are the files the parent checked; otherwise every use raises :class:`DatasetChangedError` (unpickling never
raises: a worker would die unpickling its dataset).

The identity of the manifest (device, inode, size, mtime) and of every shard (device, inode,
mtime) is kept; a process that later opens a shard (a DataLoader worker, say) checks both with
:meth:`OpenedPack.check_current`, so a dataset re-packed under a live reader raises
:class:`DatasetChangedError` instead of mixing the labels of one pack with the images of another.
Shards already open keep reading the files they opened (consistent with the labels read with them).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fastdata.formats import get_format
from fastdata.formats.errors import CorruptRecordError, DatasetChangedError
from fastdata.formats.files import FileIdentity, inside
from fastdata.formats.manifest import MANIFEST_NAME, Manifest
from fastdata.formats.pack_shards import (
    MIN_RECORD_BYTES,
    ShardPaths,
    check_shards,
    existing,
)
from fastdata.formats.shard_table import ShardTable
from fastdata.formats.targets import MappedTargets, map_targets

__all__ = ["MIN_RECORD_BYTES", "OpenedPack", "ShardPaths", "open_pack"]


@dataclass
class OpenedPack:
    """The checked contents of a packed dataset folder (small, picklable: O(shards), never O(samples)).

    Attributes:
        root: the dataset folder, resolved.
        manifest: the validated manifest (None in an unpickled copy whose folder changed: see ``error``).
        labels: ``targets.npy``, checked and mapped read-only (:attr:`targets` is its array).
        shard_paths: resolved path of every shard.
        counts: records per shard.
        manifest_identity: the manifest as it was read.
        shard_identities: ``[num_shards, 3]`` uint64: device, inode, mtime (ns) of every shard (zeros when the
            shards are not here).
        shards_here: False for the local mirror of a remote dataset (its folder holds no shards).
    """

    root: Path
    manifest: Manifest
    labels: MappedTargets
    shard_paths: ShardPaths
    counts: np.ndarray
    manifest_identity: FileIdentity
    shard_identities: np.ndarray
    shards_here: bool = True
    error: str | None = None  # unpickled after the pack changed: what changed (every use raises DatasetChangedError)

    @property
    def targets(self) -> np.ndarray:
        """Every sample's label, read-only (mapped: shared by every process; the stored dtype, int64 as packed).

        Raises:
            DatasetChangedError: this pack was unpickled after it (or its ``targets.npy``) was replaced.
        """
        self._raise_if_changed()
        return self.labels.array

    @property
    def starts(self) -> np.ndarray:
        """int64 ``num_shards + 1`` entries: the first sample of each shard, then the number of samples."""
        return np.concatenate([[0], np.cumsum(self.counts, dtype=np.int64)]).astype(np.int64)

    def shard_labels(self, shard: int, start: int, stop: int) -> np.ndarray:
        """Labels ``start`` to ``stop - 1`` from ``targets.npy``.

        Labels ``start`` to ``stop - 1`` (shard ``shard``'s samples) from ``targets.npy``: one ``pread``, a new
        int64 array.

        Raises:
            DatasetChangedError: the pack changed before this copy of it was unpickled, or ``targets.npy`` did.
        """
        self._raise_if_changed()
        return self.labels.read(start, stop)

    def _raise_if_changed(self) -> None:
        if self.error is not None:
            raise DatasetChangedError(_changed(self.root, self.error))

    def __getstate__(self) -> dict:
        if self.error is None and not isinstance(self.manifest.shards, ShardTable):  # a writer's pack: whole
            return dict(self.__dict__)
        return {
            "root": self.root,
            "manifest_identity": self.manifest_identity,
            "labels": self.labels,
            "shards_here": self.shards_here,
            "shards_digest": _digest(self.shard_identities),
            "error": self.error,
        }

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if "shards_digest" in state:
            _reopen(self, state.pop("shards_digest"))

    def locate(self, shard: int) -> tuple[np.ndarray, np.ndarray]:
        """The (position, size) arrays of the records of shard ``shard``.

        The (position, size) int64 arrays of the records of shard ``shard`` (:meth:`StorageFormat.positions`:
        a TFRecord shard's ``.idx``, read with a bound and checked against the manifest and the shard's size).

        Call it where the shard is first read; its cost is the shard's, not the dataset's.

        Raises:
            FileNotFoundError: the shard's index file is missing (the message names it).
            CorruptRecordError: the index is not the manifest's or lists records outside the shard (names it).
            DatasetChangedError: the pack was replaced since it was opened (the index read may be the new one's).
        """
        self._raise_if_changed()
        info = self.manifest.shards[shard]
        try:
            located = get_format(self.manifest.format).positions(self.root, info)
        except FileNotFoundError:
            if self.shards_here:
                self.check_current(shard)  # a re-pack removed it: say that instead
            rel = info.index or info.path
            raise FileNotFoundError(
                f"{rel} (named by the manifest) is missing from {self.root}: run `fastdata verify {self.root}`"
            ) from None
        except CorruptRecordError:
            if self.shards_here:
                self.check_current(shard)
            raise
        if self.shards_here:
            self.check_current(shard)  # the index read belongs to the shard this pack opened
        return located

    def index_path(self, shard: int) -> Path | None:
        """Shard ``shard``'s index file inside the folder, or None.

        Shard ``shard``'s index file (a TFRecord ``.idx``, an LMDB ``.loc`` sidecar) inside the folder, or None
        when the manifest names none (:func:`~fastdata.formats.files.inside`: one ``lstat`` for a plain name).

        Raises:
            CorruptRecordError: the manifest's name leads outside the folder.
        """
        rel = self.manifest.shards[shard].index
        return inside(self.root, rel) if rel else None

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
        self._raise_if_changed()
        try:
            now = FileIdentity.of(os.stat(self.root / MANIFEST_NAME))
        except FileNotFoundError:
            raise DatasetChangedError(
                _changed(self.root, "its manifest.json is gone (a pack is rewriting it?)")
            ) from None
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


def open_pack(root: str | os.PathLike, *, shards_here: bool = True, compact: bool = False) -> OpenedPack:
    """Open and check the packed dataset in ``root`` (see the module docstring for the checks).

    Args:
        root: the dataset folder.
        shards_here: False for the local mirror of a remote dataset (:mod:`fastdata.storage`), whose
            folder holds the manifest, labels and index files but not the shards: the node's shard
            cache checks each shard's size and CRC32C when it downloads it.
        compact: keep the shard list as a :class:`~fastdata.formats.shard_table.ShardTable` and pickle small (what
            a reader does; see the module docstring).

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
    try:
        manifest, shard_paths, identities = _load(base, before, shards_here=shards_here, compact=compact)
    except DatasetChangedError as exc:
        raise DatasetChangedError(_changed(base, str(exc))) from None
    labels = map_targets(manifest, existing(base, manifest.targets))
    return OpenedPack(
        root=base,
        manifest=manifest,
        labels=labels,
        shard_paths=shard_paths,
        counts=_counts(manifest),
        manifest_identity=before,
        shard_identities=identities,
        shards_here=shards_here,
    )


def _load(
    base: Path, identity: FileIdentity, *, shards_here: bool, compact: bool
) -> tuple[Manifest, ShardPaths, np.ndarray]:
    """The manifest in ``base`` with every shard's path and identity.

    The manifest in ``base`` with every shard's path and identity (:func:`check_shards`), read while the
    manifest kept ``identity``: what :func:`open_pack` and an unpickled reader's pack both do.

    Raises:
        DatasetChangedError: the manifest was replaced meanwhile (saying so, without the folder: the caller's
            message names it).
    """
    manifest = Manifest.load(base, compact=compact)
    shard_paths, identities = check_shards(base, manifest, shards_here)
    if _identity(base / MANIFEST_NAME) != identity:
        raise DatasetChangedError("its manifest.json was replaced while it was being opened")
    return manifest, shard_paths, identities


def _counts(manifest: Manifest) -> np.ndarray:
    if isinstance(manifest.shards, ShardTable):
        return manifest.shards.num_samples.copy()
    return np.array([s.num_samples for s in manifest.shards], dtype=np.int64)


def _digest(identities: np.ndarray) -> tuple[int, str]:
    return len(identities), hashlib.blake2b(np.ascontiguousarray(identities).tobytes(), digest_size=16).hexdigest()


def _reopen(pack: OpenedPack, digest: tuple[int, str]) -> None:
    """Fill an unpickled reader's pack again from its folder, if it is unchanged.

    Fill an unpickled reader's pack again from its folder, if it is still the pack its parent checked (the
    manifest's identity, and every shard's); otherwise record what changed in ``pack.error``. Never raises.
    """
    pack.manifest = None  # type: ignore[assignment]  # until read again; a use of a pack with .error checks it first
    pack.shard_paths, pack.counts = ShardPaths(pack.root, [], {}), np.zeros(0, dtype=np.int64)
    pack.shard_identities = np.zeros((0, 3), dtype=np.uint64)
    if pack.error is not None:
        return
    try:
        if _identity(pack.root / MANIFEST_NAME) != pack.manifest_identity:
            raise DatasetChangedError("its manifest.json was replaced (re-packed?)")
        manifest, shard_paths, identities = _load(
            pack.root, pack.manifest_identity, shards_here=pack.shards_here, compact=True
        )
        if _digest(identities) != tuple(digest):
            raise DatasetChangedError("a shard was replaced or rewritten since it was opened")
    except (OSError, ValueError, CorruptRecordError, DatasetChangedError) as exc:
        pack.error = str(exc) if isinstance(exc, DatasetChangedError) else f"it no longer opens ({exc})"
        return
    pack.manifest, pack.shard_paths, pack.counts, pack.shard_identities = (
        manifest,
        shard_paths,
        _counts(manifest),
        identities,
    )


def _identity(path: Path) -> FileIdentity:
    try:
        return FileIdentity.of(os.stat(path))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"no {MANIFEST_NAME} in {str(path.parent)!r}: not a finished fastdata pack "
            "(run `fastdata pack SRC OUT`, or `--resume` an interrupted one)"
        ) from None


def _changed(root: Path, what: str) -> str:
    return (
        f"the dataset in {root} changed after this ShardDataset opened it: {what}; create a new ShardDataset "
        "(and DataLoader) to read the new files"
    )
