"""Helpers for the integrity tests: a folder of distinct images, packing it, and damaging files on purpose."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fastdata.formats.manifest import Manifest
from fastdata.packing.packer import pack
from tests.images import encode, natural_image


def make_distinct_folder(
    root: Path,
    *,
    per_class: int = 15,
    classes: tuple[str, ...] = ("ant", "bee"),
    size: tuple[int, int] = (40, 56),
    seed: int = 1,
) -> dict[bytes, int]:
    """An ImageFolder of small JPEGs whose bytes are all different; returns {image bytes: label}."""
    rng = np.random.default_rng(seed)
    truth: dict[bytes, int] = {}
    for label, name in enumerate(classes):
        (root / name).mkdir(parents=True, exist_ok=True)
        for k in range(per_class):
            data = encode(natural_image(rng, *size), "JPEG", quality=92)
            (root / name / f"{k:03d}.jpg").write_bytes(data)
            truth[data] = label
    assert len(truth) == per_class * len(classes)
    return truth


def pack_quietly(src: Path, out: Path, fmt: str, **options) -> Manifest:
    """``pack`` in this process, without a progress bar (``samples_per_shard=5`` and ``keep_bytes`` unless given).

    ``keep_bytes``: the integrity tests find each record by its source bytes.
    """
    options.setdefault("samples_per_shard", 5)
    options.setdefault("keep_bytes", True)
    return pack(src, out, format=fmt, workers=0, progress=False, **options)


def flip_bit(path: Path, bit: int) -> None:
    """Flip one bit of a file in place (same inode, same size)."""
    with open(path, "r+b") as f:
        f.seek(bit // 8)
        byte = f.read(1)[0]
        f.seek(bit // 8)
        f.write(bytes([byte ^ (1 << (bit % 8))]))


def edit_manifest(root: Path, change) -> None:
    """Apply ``change(dict)`` to ``root/manifest.json`` in place."""
    path = root / "manifest.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def copy_with_wrong_target(src: Path, dst: Path, sample: int, classes: int = 3) -> np.ndarray:
    """A copy of the pack ``src`` at ``dst`` whose ``targets.npy`` gives ``sample`` another label, its checksum updated
    with it (so the file check passes and only the records' own labels disagree); returns the new labels."""
    import shutil

    from fastdata.formats.files import crc32c_hex
    from fastdata.formats.targets import encode_targets

    shutil.copytree(src, dst)
    labels = np.load(dst / "targets.npy")
    labels[sample] = (labels[sample] + 1) % classes
    data = encode_targets(labels)
    (dst / "targets.npy").write_bytes(data)
    edit_manifest(dst, lambda m: m.update(targets_crc32c=crc32c_hex(data)))
    return labels


def write_tiny_shards(
    root: Path, shards: int, *, fmt: str = "tfrecord", per_shard: int = 1, classes: int = 10, seed: int = 0
) -> Path:
    """A pack of ``shards`` shards of ``per_shard`` distinct tiny JPEGs each, written with ``ShardWriter``.

    Without fsync (a test pack need not survive a power cut): 2,000 shards take seconds, not half a minute.
    """
    import os

    import pytest

    from fastdata.formats.example import ImageRecord
    from fastdata.packing.writer import ShardWriter

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    labels = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "fsync", lambda fd: None)
        with ShardWriter(root, format=fmt, samples_per_shard=per_shard) as writer:
            for i in range(shards * per_shard):
                label = i % classes
                data = encode(natural_image(rng, 8, 8), "JPEG", quality=90)
                writer.write(ImageRecord(data, label, f"c{label}", f"c{label}/{i:05d}.jpg", "JPEG", 8, 8))
                labels.append(label)
    np.save(root / "targets.npy", np.array(labels, np.int64))
    Manifest(format=fmt, classes=[f"c{k}" for k in range(classes)], shards=writer.shards).save(root)
    return root


def open_shard_files(folder: Path) -> dict[int, str]:
    """This process's open descriptors on shard files (``shard-*``) under ``folder``: {fd: file name}."""
    import os

    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the descriptor listdir itself used, gone by now
            continue
        if target.startswith(str(folder.resolve()) + os.sep) and Path(target).name.startswith("shard-"):
            found[int(name)] = Path(target).name
    return found


def write_pack(out: Path, fmt: str, shards: int, per_shard: int) -> Path:
    """A pack of ``shards`` x ``per_shard`` records written straight through the format's shard writers (fast: a few
    distinct tiny JPEGs repeated, no image folder); record ``n``'s label is ``n % 10``, and its image is
    ``tiny_jpegs()[n % 7]``. The manifest and ``targets.npy`` are what ``fastdata pack`` writes."""
    from fastdata.formats import get_format
    from fastdata.formats.example import ImageRecord
    from fastdata.formats.files import crc32c_hex
    from fastdata.formats.targets import encode_targets

    out.mkdir(parents=True, exist_ok=True)
    jpegs = tiny_jpegs()
    storage = get_format(fmt)
    infos = []
    for k in range(shards):
        writer = storage.writer(out / f"shard-{k:05d}{storage.suffix}")
        for n in range(k * per_shard, (k + 1) * per_shard):
            writer.write(ImageRecord(jpegs[n % 7], n % 10, f"c{n % 10}", f"c{n % 10}/{n}.jpg", "JPEG", 8, 8))
        infos.append(writer.close(out))
    data = encode_targets(np.arange(shards * per_shard) % 10)
    (out / "targets.npy").write_bytes(data)
    Manifest(
        format=fmt,
        classes=[f"c{c}" for c in range(10)],
        shards=infos,
        targets="targets.npy",
        targets_nbytes=len(data),
        targets_crc32c=crc32c_hex(data),
    ).save(out)
    return out


def tiny_jpegs() -> list[bytes]:
    """Seven distinct 8x8 JPEGs (the images of :func:`write_pack`)."""
    rng = np.random.default_rng(0)
    return [encode(natural_image(rng, 8, 8), "JPEG", quality=80) for _ in range(7)]
