"""Test images: small but real image folders (odd sizes, grayscale, PNG, a corrupt file) and encoders."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image


def natural_image(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A smooth, photo-like RGB uint8 image (gradients, blobs and a little noise)."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    img = np.empty((height, width, 3), np.float32)
    for c in range(3):
        fx, fy = rng.uniform(0.5, 4.0, size=2) * 2 * np.pi
        phase = rng.uniform(0, 2 * np.pi)
        img[..., c] = 128 + 90 * np.sin(fx * xx / max(width, 1) + fy * yy / max(height, 1) + phase)
    img += rng.normal(0, 8, size=img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def encode(array: np.ndarray, fmt: str, mode: str | None = None, **kwargs) -> bytes:
    """``array`` encoded by PIL as ``fmt`` (converted to ``mode`` first, e.g. ``"CMYK"``), with PIL's save options."""
    image = Image.fromarray(array)
    if mode:
        image = image.convert(mode)
    buf = io.BytesIO()
    image.save(buf, format=fmt, **kwargs)
    return buf.getvalue()


@dataclass
class ImageFolderInfo:
    """What a generated image folder holds, to compare a pack against."""

    root: Path
    classes: list[str]
    good: list[tuple[str, int]] = field(default_factory=list)  # (path relative to root, label), ImageFolder order
    bad: list[str] = field(default_factory=list)  # relative paths of files a pack must skip


def make_image_folder(root: Path, *, with_bad: bool = True, seed: int = 0) -> ImageFolderInfo:
    """Build an ImageFolder tree with the awkward cases a real dataset has."""
    rng = np.random.default_rng(seed)
    classes = ["ant", "bee", "cat"]
    files: dict[str, bytes] = {}

    def rgb(h, w):
        return natural_image(rng, h, w)

    files["ant/a_baseline.jpg"] = encode(rgb(97, 131), "JPEG", quality=90)
    files["ant/b_progressive.JPG"] = encode(rgb(120, 90), "JPEG", quality=85, progressive=True)
    files["ant/nested/deeper/c_444.jpeg"] = encode(rgb(64, 200), "JPEG", quality=95, subsampling=0)
    files["ant/d_gray.jpg"] = encode(rgb(80, 60)[..., 0], "JPEG", quality=90)
    files["ant/zz_top.jpg"] = encode(rgb(70, 70), "JPEG", quality=80)
    files["bee/a_rgb.png"] = encode(rgb(50, 70), "PNG")
    files["bee/b_rgba.png"] = encode(np.dstack([rgb(45, 33), rng.integers(0, 255, (45, 33), np.uint8)]), "PNG")
    files["bee/c_palette.png"] = _palette_png(rgb(40, 52))
    files["bee/d_tiny.jpg"] = encode(rgb(3, 5), "JPEG", quality=90)
    files["cat/a_cmyk.jpg"] = encode_cmyk(rgb(66, 77))
    files["cat/b_large.jpg"] = encode(rgb(300, 410), "JPEG", quality=90)
    files["cat/c.bmp"] = encode(rgb(31, 29), "BMP")
    files["cat/d.webp"] = encode(rgb(60, 44), "WEBP", quality=90)
    bad = []
    if with_bad:
        whole = encode(rgb(100, 100), "JPEG", quality=90)
        files["bee/z_truncated.jpg"] = whole[: len(whole) // 2]
        files["cat/z_empty.png"] = b""
        files["cat/z_garbage.jpg"] = b"this is not an image at all" * 10
        bad = ["bee/z_truncated.jpg", "cat/z_empty.png", "cat/z_garbage.jpg"]
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "ant" / "README.txt").write_text("not an image, must be ignored")
    (root / "stray_file_at_top.jpg").write_bytes(files["ant/a_baseline.jpg"])  # not in a class folder: ignored
    # torchvision's order: per class, sorted(os.walk(...)) then sorted file names, so the files
    # directly in a class folder come before those in its subfolders ("zz_top" before "nested/").
    order = [
        "ant/a_baseline.jpg",
        "ant/b_progressive.JPG",
        "ant/d_gray.jpg",
        "ant/zz_top.jpg",
        "ant/nested/deeper/c_444.jpeg",
        "bee/a_rgb.png",
        "bee/b_rgba.png",
        "bee/c_palette.png",
        "bee/d_tiny.jpg",
        "bee/z_truncated.jpg",
        "cat/a_cmyk.jpg",
        "cat/b_large.jpg",
        "cat/c.bmp",
        "cat/d.webp",
        "cat/z_empty.png",
        "cat/z_garbage.jpg",
    ]
    order = [rel for rel in order if rel in files]
    assert sorted(order) == sorted(files), "fixture order list is out of date"
    good = [(rel, classes.index(rel.split("/")[0])) for rel in order if rel not in bad]
    return ImageFolderInfo(root=root, classes=classes, good=good, bad=sorted(bad))


def _palette_png(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).convert("P", palette=Image.ADAPTIVE, colors=64).save(buf, format="PNG")
    return buf.getvalue()


def encode_cmyk(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).convert("CMYK").save(buf, format="JPEG", quality=92)
    return buf.getvalue()


def pack_one_image_per_class(
    tmp_path_factory, count: int, *, samples_per_shard: int, shape=lambda k: (6, 6), **options
) -> Path:
    """Pack ``count`` classes of one PNG each into LMDB shards: a sample's label identifies it."""
    from fastdata.packing.packer import pack

    src = tmp_path_factory.mktemp("one_per_class_src")
    for k in range(count):
        (src / f"c{k:02d}").mkdir()
        Image.fromarray(np.full((*shape(k), 3), k * 255 // max(count, 1), np.uint8)).save(src / f"c{k:02d}" / "x.png")
    out = tmp_path_factory.mktemp("one_per_class_packed")
    pack(src, out, format="lmdb", samples_per_shard=samples_per_shard, workers=0, progress=False, **options)
    return out
