"""Tests for tools/make_imagenet_like.py (the synthetic ImageNet-like data set generator)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import make_imagenet_like as gen  # noqa: E402

FILE_RE = re.compile(r"^(n\d{8})_(\d+)\.(JPEG|png)$")


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root``, by relative path."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_bytes_whatever_the_worker_count(tmp_path):
    kwargs = dict(num_images=24, num_classes=4, seed=3, png_fraction=0.1, gray_fraction=0.1, progress=False)
    gen.generate(tmp_path / "one", workers=1, **kwargs)
    gen.generate(tmp_path / "two", workers=2, **kwargs)
    one, two = tree(tmp_path / "one"), tree(tmp_path / "two")
    assert len(one) == 24
    assert one == two
    gen.generate(tmp_path / "other", workers=2, **{**kwargs, "seed": 4})
    other = tree(tmp_path / "other")
    assert len(other) == 24
    assert not set(one.values()) & set(other.values()), "another seed must give other images"


def test_a_smaller_run_is_a_prefix_of_a_larger_one(tmp_path):
    gen.generate(tmp_path / "small", num_images=6, num_classes=3, workers=1, progress=False)
    gen.generate(tmp_path / "large", num_images=12, num_classes=3, workers=2, progress=False)
    small, large = tree(tmp_path / "small"), tree(tmp_path / "large")
    assert len(small) == 6 and len(large) == 12
    assert all(large.get(path) == data for path, data in small.items())


def test_image_depends_only_on_seed_and_index():
    spec_a, data_a = gen.make_image(7, 11)
    spec_b, data_b = gen.make_image(7, 11)
    assert spec_a == spec_b and data_a == data_b
    assert gen.make_image(7, 12)[1] != data_a


def test_imagefolder_layout(tmp_path):
    out = tmp_path / "data"
    stats = gen.generate(out, num_images=30, num_classes=6, seed=1, workers=2, progress=False)
    classes = sorted(p.name for p in out.iterdir())
    assert len(classes) == 6 and all(p.is_dir() for p in out.iterdir())
    assert classes == gen.class_names(6, seed=1)
    assert all(re.fullmatch(r"n\d{8}", c) for c in classes)
    per_class = {c: sorted(p.name for p in (out / c).iterdir()) for c in classes}
    assert all(len(files) == 5 for files in per_class.values()), per_class
    for cls, files in per_class.items():
        for name in files:
            match = FILE_RE.match(name)
            assert match and match.group(1) == cls, name
            image = cv2.imread(str(out / cls / name), cv2.IMREAD_UNCHANGED)
            assert image is not None and image.dtype == np.uint8 and image.ndim in (2, 3)
    assert stats["count"] == 30


def test_class_names_are_deterministic_and_distinct():
    names = gen.class_names(500, seed=5)
    assert names == gen.class_names(500, seed=5)
    assert len(set(names)) == 500 and names == sorted(names)
    assert names != gen.class_names(500, seed=6)


@pytest.mark.parametrize("png, gray", [(0.5, 0.25), (1.0, 0.0), (0.0, 1.0)])
def test_png_and_gray_fractions(tmp_path, png, gray):
    n = 40
    stats = gen.generate(
        tmp_path / "d", num_images=n, num_classes=4, workers=2, png_fraction=png, gray_fraction=gray, progress=False
    )
    files = [p for p in (tmp_path / "d").rglob("*") if p.is_file()]
    pngs = [p for p in files if p.suffix == ".png"]
    grays = [p for p in files if cv2.imread(str(p), cv2.IMREAD_UNCHANGED).ndim == 2]
    assert abs(len(pngs) - png * n) <= 2
    assert abs(len(grays) - gray * n) <= 2
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert all(p.read_bytes()[:2] == b"\xff\xd8" for p in files if p.suffix == ".JPEG")
    assert stats["png_fraction"] == pytest.approx(len(pngs) / n)
    assert stats["gray_fraction"] == pytest.approx(len(grays) / n)


def test_stats_match_the_files(tmp_path):
    stats = gen.generate(tmp_path / "d", num_images=20, num_classes=2, workers=1, progress=False)
    files = [p for p in (tmp_path / "d").rglob("*") if p.is_file()]
    shapes = [cv2.imread(str(p), cv2.IMREAD_UNCHANGED).shape[:2] for p in files]
    sizes = [p.stat().st_size for p in files]
    assert stats["count"] == len(files) == 20
    assert stats["mean_width"] == pytest.approx(np.mean([w for _, w in shapes]))
    assert stats["mean_height"] == pytest.approx(np.mean([h for h, _ in shapes]))
    assert stats["median_width"] == pytest.approx(np.median([w for _, w in shapes]))
    assert stats["mean_kb"] == pytest.approx(np.mean(sizes) / 1024)
    assert stats["total_mb"] == pytest.approx(sum(sizes) / 1024**2)
    assert stats["seconds"] > 0 and stats["images_per_s"] > 0
    line = gen.format_stats(stats)
    assert "\n" not in line and "20 images" in line and "KB" in line


def test_refuses_a_non_empty_output(tmp_path):
    out = tmp_path / "d"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    with pytest.raises(FileExistsError, match="not empty"):
        gen.generate(out, num_images=4, num_classes=2, workers=1, progress=False)
    with pytest.raises(FileExistsError, match="keep.txt"):
        gen.generate(out, num_images=4, num_classes=2, workers=1, progress=False, overwrite=True)
    assert (out / "keep.txt").read_text() == "precious"


def test_overwrite_replaces_a_previous_run(tmp_path):
    out = tmp_path / "d"
    gen.generate(out, num_images=6, num_classes=3, seed=0, workers=1, progress=False)
    gen.generate(out, num_images=4, num_classes=2, seed=1, workers=1, progress=False, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == gen.class_names(2, seed=1)
    assert len([p for p in out.rglob("*") if p.is_file()]) == 4


def test_cli_refuses_non_empty_output_without_traceback(tmp_path, capsys):
    out = tmp_path / "d"
    out.mkdir()
    (out / "x").write_text("")
    assert gen.main([str(out), "--num-images", "4", "--num-classes", "2", "--quiet"]) != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--overwrite" in err and len(err.strip().splitlines()) == 1


def test_cli_writes_and_prints_one_stats_line(tmp_path, capsys):
    out = tmp_path / "d"
    code = gen.main([str(out), "--num-images", "6", "--num-classes", "3", "--workers", "1", "--quiet"])
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("6 images")
    assert len([p for p in out.rglob("*") if p.is_file()]) == 6


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_images=0, num_classes=1), "num_images"),
        (dict(num_images=3, num_classes=5), "num_classes"),
        (dict(num_images=3, num_classes=1, workers=0), "workers"),
        (dict(num_images=3, num_classes=1, png_fraction=1.5), "png_fraction"),
        (dict(num_images=3, num_classes=1, gray_fraction=-0.1), "gray_fraction"),
        (dict(num_images=3, num_classes=1, seed=-1), "seed"),
    ],
)
def test_bad_arguments_are_rejected(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        gen.generate(tmp_path / "d", progress=False, **kwargs)
    assert not (tmp_path / "d").exists()


def test_sizes_follow_imagenet():
    specs = [gen.image_spec(0, i) for i in range(4000)]
    dims = np.array([(s.width, s.height) for s in specs])
    assert abs(dims[:, 0].mean() - 470) < 15 and abs(dims[:, 1].mean() - 390) < 15
    assert tuple(np.median(dims, 0)) == (500, 375)
    assert dims.max() <= 2000 and dims.min() >= 1
    assert (dims.max(1) > 500).mean() > 0.02, "needs a tail of large images"
    assert (dims.max(1) < 500).mean() > 0.1, "needs some small images"
    assert (dims[:, 1] > dims[:, 0]).mean() > 0.1, "needs portrait images"
    qualities = {s.quality for s in specs}
    assert min(qualities) <= 80 and max(qualities) >= 95


def test_content_looks_photographic():
    image = gen.render_image(np.random.default_rng(0), 320, 240)
    assert image.shape == (240, 320, 3) and image.dtype == np.uint8
    pixels = image.reshape(-1, 3).astype(np.float64)
    assert pixels.std(0).min() > 15, "not a flat picture"
    gray = image.astype(np.float64).mean(2)
    neighbour = np.corrcoef(gray[:, :-1].ravel(), gray[:, 1:].ravel())[0, 1]
    assert 0.5 < neighbour < 0.999, f"neighbouring pixels must correlate (not white noise): {neighbour}"
    channels = np.corrcoef(pixels.T)
    assert channels[np.triu_indices(3, 1)].mean() > 0.3, "colour channels must correlate"
    data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 90])[1]
    assert 15_000 < data.size < 150_000, f"JPEG size {data.size} B is not photo-like for 320x240"


def test_gray_render_is_single_channel():
    image = gen.render_image(np.random.default_rng(1), 50, 70, gray=True)
    assert image.shape == (70, 50) and image.dtype == np.uint8
