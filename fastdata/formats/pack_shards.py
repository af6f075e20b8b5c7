"""Every shard a manifest names, checked where it lies when a pack is opened: one ``lstat`` each, nothing read.

:func:`check_shards` resolves each shard inside the dataset folder (a plain file name costs one ``lstat``; a symlink
or a sub-folder is resolved and must stay inside), checks it is a regular file of the manifest's size that can hold
the records the manifest claims (and the format's declared index), and returns every shard's path
(:class:`ShardPaths`) and identity (device, inode, mtime). :mod:`fastdata.formats.packed` calls it when a pack is
opened and again when a reader's pack is unpickled.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fastdata.formats import get_format
from fastdata.formats.errors import CorruptRecordError
from fastdata.formats.files import resolve_inside, stat_regular
from fastdata.formats.manifest import Manifest
from fastdata.formats.manifest_entries import ShardInfo
from fastdata.formats.shard_table import Rows, ShardTable

__all__ = ["MIN_RECORD_BYTES", "ShardPaths", "check_shards", "existing"]

MIN_RECORD_BYTES = 16  # the smallest record either format can store (TFRecord framing alone is 16 bytes)


class ShardPaths(Rows):
    """Every shard's resolved path, as ``str``.

    The folder and the manifest's own names (shared with the manifest: a
    reader's :class:`~fastdata.formats.shard_table.Names`), and whole paths only for the few shards that resolve
    elsewhere inside the folder (a symlink, a sub-folder). A numpy array of the paths would take 4 bytes a character.
    """

    def __init__(self, root: Path, names: Sequence[str], elsewhere: dict[int, str]) -> None:
        self.root, self.names, self.elsewhere = str(root), names, elsewhere

    def __len__(self) -> int:
        return len(self.names)

    def _row(self, shard: int) -> str:
        return self.elsewhere.get(shard) or f"{self.root}/{self.names[shard]}"


def check_shards(base: Path, manifest: Manifest, shards_here: bool) -> tuple[ShardPaths, np.ndarray]:
    """Every shard's resolved path and identity, checked.

    Every shard's resolved path and identity (device, inode, mtime; zeros when not here), checked as
    :func:`open_pack` says: one ``lstat`` each, no read (a shard's count is proven where it is first read).
    """
    storage = get_format(manifest.format)
    elsewhere, identities = {}, np.zeros((len(manifest.shards), 3), dtype=np.uint64)
    for number, shard in enumerate(manifest.shards):
        path, st = _shard_here(base, shard.path) if shards_here else (resolve_inside(base, shard.path), None)
        if shard.num_samples > shard.nbytes // MIN_RECORD_BYTES:
            raise CorruptRecordError(path, None, f"cannot hold the {shard.num_samples} records the manifest claims")
        storage.check_declared(base, shard)
        if st is not None:
            st = stat_regular(path, nbytes=shard.nbytes) if stat.S_ISLNK(st.st_mode) else _checked(st, path, shard)
            identities[number] = (st.st_dev, st.st_ino, st.st_mtime_ns)
        if str(path) != f"{base}/{shard.path}":
            elsewhere[number] = str(path)
    names = manifest.shards.paths if isinstance(manifest.shards, ShardTable) else [s.path for s in manifest.shards]
    return ShardPaths(base, names, elsewhere), identities


def _shard_here(root: Path, rel: str) -> tuple[str | Path, os.stat_result]:
    """A shard's path resolved inside ``root``, and its ``lstat``.

    A shard's path resolved inside ``root`` and its ``lstat``: one system call for a plain file name (what the
    packer writes), :func:`resolve_inside` for anything else (a symlink, a sub-folder).

    Raises:
        FileNotFoundError: no such file (the message says what to run).
        CorruptRecordError: the path leads outside the dataset folder.
    """
    plain = "/" not in rel and rel not in ("", ".", "..")
    path = f"{root}/{rel}" if plain else existing(root, rel)  # a str: pathlib would intern every name for good
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{rel} (named by the manifest) is missing from {root}: run `fastdata verify {root}`"
        ) from None
    if stat.S_ISLNK(st.st_mode) and plain:
        path = existing(root, rel)  # a symlink: where it leads must stay inside
    return path, st


def _checked(st: os.stat_result, path: str | Path, shard: ShardInfo) -> os.stat_result:
    """``stat_regular``'s checks on an ``lstat`` already made (of a path that is not a symlink)."""
    if not stat.S_ISREG(st.st_mode) or st.st_size != shard.nbytes:
        return stat_regular(path, nbytes=shard.nbytes)  # raises with stat_regular's message
    return st


def existing(root: Path, rel: str) -> Path:
    """The path of manifest entry ``rel`` inside ``root``; ``FileNotFoundError`` in one line if it is missing."""
    path = resolve_inside(root, rel)
    if not os.path.lexists(path):
        raise FileNotFoundError(f"{rel} (named by the manifest) is missing from {root}: run `fastdata verify {root}`")
    return path
