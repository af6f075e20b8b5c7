"""Third-party TFRecord files read without a fastdata manifest.

Which files in a folder or glob are records,
and each file's DALI-style ``.idx`` (read if present, else built and written beside it when the folder allows).
"""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastdata.formats.manifest import MANIFEST_NAME
from fastdata.formats.tfrecord_framing import build_index
from fastdata.formats.tfrecord_index import max_index_bytes, read_index, write_index
from fastdata.formats.unfinished import refuse_unfinished

logger = logging.getLogger(__name__)


def has_manifest(root: Any) -> bool:
    """Whether ``root`` is a path to a fastdata pack (a folder holding ``manifest.json``)."""
    return isinstance(root, (str, os.PathLike)) and (Path(root) / MANIFEST_NAME).is_file()


def tfrecord_paths(root: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    """The third-party TFRecord files of ``root`` (a folder without a manifest, a file, a glob or a list).

    Raises:
        FileNotFoundError: no TFRecord file there.
        UnfinishedPackError: ``root`` is a folder that ``fastdata pack`` is writing, or left unfinished (its shards
            are not third-party records): the message names the writer.
    """
    if isinstance(root, (str, os.PathLike)):
        path = Path(root)
        if path.is_dir():
            refuse_unfinished(path)
            paths = sorted(p for p in path.iterdir() if p.is_file() and _looks_like_tfrecord(p))
        elif path.is_file():
            paths = [path]
        else:
            paths = [Path(p) for p in sorted(glob.glob(str(root))) if not p.endswith(_NOT_RECORDS)]
    else:
        paths = [Path(p) for p in root]
    if not paths:
        raise FileNotFoundError(
            f"{root!r} holds neither a fastdata manifest ({MANIFEST_NAME}) nor TFRecord files: "
            "pack an image folder with `fastdata pack SRC OUT --format tfrecord|lmdb`, or pass TFRecord files"
        )
    return paths


_NOT_RECORDS = (".idx", ".index", ".json", ".txt", ".npy", ".lmdb", ".loc", ".tmp")


def _looks_like_tfrecord(path: Path) -> bool:
    name = path.name
    if name.endswith(_NOT_RECORDS) or name.startswith("."):
        return False
    return ".tfrecord" in name or name.startswith(("train-", "validation-", "val-", "test-"))


def load_or_build_index(path: Path) -> np.ndarray:
    """The record index of a third-party TFRecord file: its ``.idx`` file if present, else built by a scan and saved."""
    for candidate in (path.with_name(path.name + ".idx"), path.with_suffix(".idx")):
        if candidate.is_file():
            return read_index(candidate, max_bytes=max_index_bytes(os.path.getsize(path)))
    index = build_index(path)
    target = path.with_name(path.name + ".idx")
    try:
        write_index(target, index)
        logger.info("built index %s", target)
    except OSError:
        logger.info("built the index of %s in memory (its folder is not writable)", path)
    return index
