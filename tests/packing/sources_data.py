"""The same small images written as every kind of pack source, and reading a pack back record by record."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from fastdata.formats import get_format
from fastdata.formats.manifest import Manifest
from tests.images import encode, natural_image

CLASSES = ("ant", "bee", "cat")


def make_samples(count: int = 24, seed: int = 3) -> list[tuple[bytes, int, dict]]:
    """``count`` distinct small JPEGs with a class label and one value of every field type."""
    rng = np.random.default_rng(seed)
    samples = []
    for k in range(count):
        h, w = int(rng.integers(20, 40)), int(rng.integers(20, 40))
        data = encode(natural_image(rng, h, w), "JPEG", quality=90)
        boxes = rng.random((int(rng.integers(0, 4)), 4)).astype(np.float32).round(3).tolist()
        fields = {
            "score": round(float(rng.random()), 4),
            "count": int(k * 7),
            "caption": f"image {k} ü",
            "tags": [int(t) for t in rng.integers(0, 10, size=int(rng.integers(1, 4)))],
            "boxes": [b for box in boxes for b in box],
            "center": [float(h) / 2, float(w) / 2],
            "extra": {"k": k, "odd": bool(k % 2)},
        }
        samples.append((data, k % len(CLASSES), fields))
    return samples


def write_image_folder(root: Path, samples) -> Path:
    for k, (data, label, _) in enumerate(samples):
        folder = root / CLASSES[label]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{k:03d}.jpg").write_bytes(data)
    return root


def imagefolder_order(samples) -> list[int]:
    """The sample numbers in the order ImageFolder lists them (class, then file name)."""
    return sorted(range(len(samples)), key=lambda k: (samples[k][1], k))


def write_csv(root: Path, samples) -> Path:
    images = root / "img"
    images.mkdir(parents=True)
    with open(root / "list.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["path", "label", "caption", "count"])
        for k, (data, label, fields) in enumerate(samples):
            (images / f"{k:03d}.jpg").write_bytes(data)
            out.writerow([f"img/{k:03d}.jpg", CLASSES[label], fields["caption"], fields["count"]])
    return root / "list.csv"


def write_jsonl(root: Path, samples) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "list.jsonl", "w") as f:
        for k, (data, label, fields) in enumerate(samples):
            (root / f"{k:03d}.jpg").write_bytes(data)
            path = str(root / f"{k:03d}.jpg") if k % 2 else f"{k:03d}.jpg"  # absolute and relative paths
            f.write(json.dumps({"file": path, "label": label, **fields}) + "\n")
    return root / "list.jsonl"


def write_hf_parquet(root: Path, samples, *, files: int = 2, row_group_size: int = 5) -> Path:
    """Parquet files as ``datasets`` stores an image dataset on the Hub: an ``image`` column of
    ``{bytes, path}`` structs, a ``ClassLabel`` ``label`` column, the ``huggingface`` schema metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    features = {
        "image": {"_type": "Image"},
        "label": {"names": list(CLASSES), "_type": "ClassLabel"},
        "score": {"dtype": "float64", "_type": "Value"},
        "tags": {"feature": {"dtype": "int64", "_type": "Value"}, "_type": "Sequence"},
    }
    meta = {b"huggingface": json.dumps({"info": {"features": features}}).encode()}
    schema = pa.schema(
        [
            ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
            ("label", pa.int64()),
            ("score", pa.float64()),
            ("tags", pa.list_(pa.int64())),
        ],
        metadata=meta,
    )
    (root / "data").mkdir(parents=True)
    per = -(-len(samples) // files)
    for i in range(files):
        part = samples[i * per : (i + 1) * per]
        table = pa.table(
            {
                "image": [{"bytes": d, "path": f"{i}-{k}.jpg"} for k, (d, _, _) in enumerate(part)],
                "label": [label for _, label, _ in part],
                "score": [f["score"] for _, _, f in part],
                "tags": [f["tags"] for _, _, f in part],
            },
            schema=schema,
        )
        pq.write_table(table, root / "data" / f"train-{i:05d}-of-{files:05d}.parquet", row_group_size=row_group_size)
    return root / "data"


def write_webdataset(root: Path, samples, *, shards: int = 3) -> str:
    """Tars written by ``webdataset.TarWriter``: ``jpg``, ``cls`` and ``json`` per sample; returns the brace pattern."""
    import webdataset as wds

    root.mkdir(parents=True, exist_ok=True)
    per = -(-len(samples) // shards)
    for i in range(shards):
        with wds.TarWriter(str(root / f"shard-{i:06d}.tar"), mtime=0) as sink:
            for k in range(i * per, min(len(samples), (i + 1) * per)):
                data, label, fields = samples[k]
                sink.write({"__key__": f"sample{k:06d}", "jpg": data, "cls": label, "json": fields})
    return str(root / f"shard-{{000000..{shards - 1:06d}}}.tar")


def read_back(out: Path) -> tuple[Manifest, list[tuple[bytes, int, str]]]:
    """The manifest and every record (image bytes, label, class text) in dataset order, CRC-checked."""
    manifest = Manifest.load(out)
    storage = get_format(manifest.format)
    records: list[tuple[bytes, int, str]] = []
    for shard in manifest.shards:
        got = []
        problems = storage.verify(out, shard, lambda j, r: got.append((r.image, r.label, r.class_name)))  # noqa: B023 (called within this iteration)
        assert not problems, problems
        records += got
    targets = np.load(out / manifest.targets)
    assert targets.tolist() == [label for _, label, _ in records]
    return manifest, records


def shard_bytes(out: Path) -> dict[str, bytes]:
    """Every file fastdata wrote to ``out``, by name (to compare two packs byte for byte)."""
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file() and not p.name.startswith(".")}
