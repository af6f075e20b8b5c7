"""The pack cache of the benchmark: the image folder packed once per format, reused while its files are unchanged.

``fastdata bench DATA`` measures the fastdata pipelines on packs of DATA kept in
``DATA.parent / (DATA.name + ".fastdata-cache")``; a stamp next to each pack records the fingerprint
of the folder it was packed from (paths, sizes, mtimes, classes), and a changed folder is packed again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

from fastdata.packing.scan import scan_image_folder

logger = logging.getLogger(__name__)

__all__ = ["STAMP", "default_cache", "folder_fingerprint", "prepare_cache"]

#: The suffix of the stamp written next to each pack (``cache/<format>.source.json``).
STAMP = ".source.json"
_PACK_SEED = 0  # shuffled packs: DALI's reader only shuffles within a buffer


def default_cache(data: str | os.PathLike) -> Path:
    """``DATA.parent / (DATA.name + ".fastdata-cache")``."""
    data = Path(data).resolve()
    return data.parent / (data.name + ".fastdata-cache")


def folder_fingerprint(data: Path, paths: Sequence[str], classes: Sequence[str]) -> str:
    """A digest of the classes and of each file's path, size and mtime: it changes when the folder does."""
    digest = hashlib.sha256(json.dumps(list(classes)).encode())
    for rel in paths:
        st = os.stat(data / rel)
        digest.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def prepare_cache(
    data: str | os.PathLike,
    cache: str | os.PathLike,
    *,
    formats: Sequence[str] = ("tfrecord", "lmdb"),
    workers: int | None = None,
    progress: bool = True,
) -> dict[str, Path]:
    """Pack ``data`` into ``cache/<format>`` unless a pack of the same files is already there.

    The shards are packed in a seeded shuffled order (``shuffle_seed=0``), as one packs for
    training (DALI's reader only shuffles within a buffer). A pack is reused when its manifest
    exists and the fingerprint of the folder (paths, sizes, mtimes, classes) recorded next to it
    matches; otherwise it is rebuilt.

    Args:
        data: the image folder.
        cache: the folder that holds one packed folder per format.
        formats: the formats to pack.
        workers: packing processes (None: all cores; 0: in this process).
        progress: show the packer's progress bar.

    Returns:
        ``{format: packed folder}``.
    """
    from fastdata.formats.manifest import MANIFEST_NAME
    from fastdata.packing.packer import pack

    data, cache = Path(data), Path(cache)
    scan = scan_image_folder(data)
    # "records=transcoded": packs cached before pack re-coded JPEGs (keep-bytes records) are packed again
    stamp = folder_fingerprint(data, scan.paths, scan.classes + [f"shuffle_seed={_PACK_SEED}", "records=transcoded"])
    roots = {}
    for fmt in formats:
        out, stamp_file = cache / fmt, cache / f"{fmt}{STAMP}"
        fresh = (
            (out / MANIFEST_NAME).is_file()
            and stamp_file.is_file()
            and json.loads(stamp_file.read_text()).get("fingerprint") == stamp
        )
        if not fresh:
            logger.info("packing %s into %s", data, out)
            start = time.perf_counter()
            pack(data, out, format=fmt, shuffle_seed=_PACK_SEED, workers=workers, overwrite=True, progress=progress)
            stamp_file.write_text(
                json.dumps(
                    {
                        "fingerprint": stamp,
                        "source": str(data),
                        "pack_s": time.perf_counter() - start,
                        "workers": workers,
                    }
                )
            )
        roots[fmt] = out
    return roots
