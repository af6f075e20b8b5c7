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

Nothing per sample is kept beyond the mapped labels: a record's place in its shard comes from the
shard itself when it is first read (LMDB: its number; TFRecord: its ``.idx``), so an ``OpenedPack``
pickles in a size that depends on the shards, never on the samples.

The identity of the manifest (device, inode, size, mtime) and of every shard (device, inode,
mtime) is kept; a process that later opens a shard (a DataLoader worker, say) checks both with
:meth:`OpenedPack.check_current`, so a dataset re-packed under a live reader raises
:class:`DatasetChangedError` instead of mixing the labels of one pack with the images of another.
Shards already open keep reading the files they opened (consistent with the labels read with them).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fastdata.formats import get_format
from fastdata.formats.errors import CorruptRecordError, DatasetChangedError
from fastdata.formats.files import FileIdentity, inside, resolve_inside, stat_regular
from fastdata.formats.manifest import MANIFEST_NAME, Manifest
from fastdata.formats.manifest_entries import ShardInfo
from fastdata.formats.targets import MappedTargets, map_targets

__all__ = ["MIN_RECORD_BYTES", "OpenedPack", "ShardPaths", "open_pack"]

MIN_RECORD_BYTES = 16  # the smallest record either format can store (TFRecord framing alone is 16 bytes)


class ShardPaths(Sequence[str]):
    """Every shard's resolved path, as ``str``: the folder and the manifest's own names (the same ``str`` objects,
    so pickled once with the manifest), and whole paths only for the few shards that resolve elsewhere inside the
    folder (a symlink, a sub-folder). A numpy array of the paths would pickle 4 bytes a character a shard.
    """

    def __init__(self, root: Path, names: list[str], elsewhere: dict[int, str]) -> None:
        self.root, self.names, self.elsewhere = str(root), names, elsewhere

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, shard):  # type: ignore[override]
        if isinstance(shard, slice):
            return [self[k] for k in range(*shard.indices(len(self)))]
        shard = range(len(self.names))[shard]  # an IndexError for a shard that is not there
        return self.elsewhere.get(shard) or f"{self.root}/{self.names[shard]}"


@dataclass
class OpenedPack:
    """The checked contents of a packed dataset folder (small, picklable: O(shards), never O(samples)).

    Attributes:
        root: the dataset folder, resolved.
        manifest: the validated manifest.
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

    @property
    def targets(self) -> np.ndarray:
        """Every sample's label, read-only (mapped: shared by every process; the stored dtype, int64 as packed).

        Raises:
            DatasetChangedError: this pack was unpickled after its ``targets.npy`` was replaced.
        """
        return self.labels.array

    @property
    def starts(self) -> np.ndarray:
        """int64 ``num_shards + 1`` entries: the first sample of each shard, then the number of samples."""
        return np.concatenate([[0], np.cumsum(self.counts, dtype=np.int64)]).astype(np.int64)

    def locate(self, shard: int) -> tuple[np.ndarray, np.ndarray]:
        """The (position, size) int64 arrays of the records of shard ``shard`` (:meth:`StorageFormat.positions`:
        a TFRecord shard's ``.idx``, read with a bound and checked against the manifest and the shard's size).

        Call it where the shard is first read; its cost is the shard's, not the dataset's.

        Raises:
            FileNotFoundError: the shard's index file is missing (the message names it).
            CorruptRecordError: the index is not the manifest's or lists records outside the shard (names it).
            DatasetChangedError: the pack was replaced since it was opened (the index read may be the new one's).
        """
        info = self.manifest.shards[shard]
        try:
            located = get_format(self.manifest.format).positions(self.root, info)
        except FileNotFoundError:
            if self.shards_here:
                self.check_current(shard)  # a re-pack removed it: say that instead
            rel = info.index or info.path
            raise FileNotFoundError(f"{rel} (named by the manifest) is missing from {self.root}: "
                                    f"run `fastdata verify {self.root}`") from None
        except CorruptRecordError:
            if self.shards_here:
                self.check_current(shard)
            raise
        if self.shards_here:
            self.check_current(shard)  # the index read belongs to the shard this pack opened
        return located

    def index_path(self, shard: int) -> Path | None:
        """Shard ``shard``'s index file (a TFRecord ``.idx``, an LMDB ``.loc`` sidecar) inside the folder, or None
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
    elsewhere, identities = {}, []
    for number, shard in enumerate(manifest.shards):  # one lstat each, no read: a shard's count is proven at first use
        path, st = _shard_here(base, shard.path) if shards_here else (resolve_inside(base, shard.path), None)
        if shard.num_samples > shard.nbytes // MIN_RECORD_BYTES:
            raise CorruptRecordError(path, None, f"cannot hold the {shard.num_samples} records the manifest claims")
        storage.check_declared(base, shard)
        if st is not None:
            st = stat_regular(path, nbytes=shard.nbytes) if stat.S_ISLNK(st.st_mode) else _checked(st, path, shard)
        if str(path) != f"{base}/{shard.path}":
            elsewhere[number] = str(path)
        identities.append((st.st_dev, st.st_ino, st.st_mtime_ns) if st is not None else (0, 0, 0))
    labels = map_targets(manifest, _existing(base, manifest.targets))
    if _identity(base / MANIFEST_NAME) != before:
        raise DatasetChangedError(_changed(base, "its manifest.json was replaced while it was being opened"))
    return OpenedPack(
        root=base, manifest=manifest, labels=labels,
        shard_paths=ShardPaths(base, [s.path for s in manifest.shards], elsewhere),
        counts=np.array([s.num_samples for s in manifest.shards], dtype=np.int64), manifest_identity=before,
        shard_identities=np.array(identities, dtype=np.uint64).reshape(-1, 3), shards_here=shards_here,
    )


def _shard_here(root: Path, rel: str) -> tuple[Path, os.stat_result]:
    """A shard's path resolved inside ``root`` and its ``lstat``: one system call for a plain file name (what the
    packer writes), :func:`resolve_inside` for anything else (a symlink, a sub-folder).

    Raises:
        FileNotFoundError: no such file (the message says what to run).
        CorruptRecordError: the path leads outside the dataset folder.
    """
    plain = "/" not in rel and rel not in ("", ".", "..")
    path = root / rel if plain else _existing(root, rel)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{rel} (named by the manifest) is missing from {root}: "
                                f"run `fastdata verify {root}`") from None
    if stat.S_ISLNK(st.st_mode) and plain:
        path = _existing(root, rel)  # a symlink: where it leads must stay inside
    return path, st


def _checked(st: os.stat_result, path: Path, shard: ShardInfo) -> os.stat_result:
    """``stat_regular``'s checks on an ``lstat`` already made (of a path that is not a symlink)."""
    if not stat.S_ISREG(st.st_mode) or st.st_size != shard.nbytes:
        return stat_regular(path, nbytes=shard.nbytes)  # raises with stat_regular's message
    return st


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


def _changed(root: Path, what: str) -> str:
    return (f"the dataset in {root} changed after this ShardDataset opened it: {what}; create a new ShardDataset "
            "(and DataLoader) to read the new files")
