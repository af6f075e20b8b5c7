#!/usr/bin/env python
"""Generate a realistic, deterministic synthetic ImageNet-like image folder.

Writes an ImageFolder tree (``OUT/<wnid>/<wnid>_<number>.JPEG``) that looks like ImageNet's
train set where loading speed is concerned: sizes (mean about 470x390, mostly 500x375 /
375x500 / 500x333, some small, a tail up to 2000 px), photographic content (1/f texture,
smooth light, sharp-edged shapes, correlated colours), JPEG 4:2:0 at qualities 75-98 (a few
progressive), about 110 KB per file, plus a few grayscale images and PNGs. Each image depends
only on ``(seed, index)``: the bytes are the same whatever the number of workers.

Usage: ``python tools/make_imagenet_like.py OUT --num-images 10000 --num-classes 100``; from
Python put ``tools/`` on ``sys.path``, then ``make_imagenet_like.generate(out, num_images=50,
num_classes=5)``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import multiprocessing
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

logger = logging.getLogger(__name__)

CLASS_NAME_RE = re.compile(r"^n\d{8}$")

# --- image geometry (tuned so the mean is about 470x390, median 500x375) ---------------
_P_LONG_500 = 0.75  # long side exactly 500 px (Flickr-style downsizing)
_P_SMALL = 0.19  # long side uniform in [_SMALL_MIN, 500)
_SMALL_MIN = 120
_LARGE_RANGE = (520, 2000)  # the rest: long side log-uniform in this range
_P_PORTRAIT = 0.19
_P_SQUARE = 0.05
# aspect (long / short): 4:3 55%, 3:2 25%, the rest uniform in [1.05, 1.95]
_PHOTO_LONG_RANGE = (1500, 1800)  # profile "photos": camera-sized images, mean about 1650x1200
#: Size profiles: "imagenet" (the ILSVRC train set's sizes) and "photos" (large photos, where crop-region
#: decoding and DCT scaling matter most).
PROFILES = ("imagenet", "photos")

# --- encoding -----------------------------------------------------------------------------
_QUALITIES = (75, 80, 85, 88, 90, 92, 95, 98)
_QUALITY_P = (0.12, 0.12, 0.14, 0.10, 0.20, 0.12, 0.14, 0.06)
_P_PROGRESSIVE = 0.08
_PHOTO_QUALITIES, _PHOTO_QUALITY_P = (70, 75, 80, 85, 90), (0.2, 0.3, 0.25, 0.15, 0.1)  # camera/phone JPEG settings
# Weyl-sequence multipliers for the PNG / grayscale picks: well spread, exact on average.
_PNG_ALPHA = (math.sqrt(5) - 1) / 2
_GRAY_ALPHA = math.sqrt(2) - 1

# --- content ------------------------------------------------------------------------------
_SLOPE_RANGE = (-0.1, 0.3)  # octave amplitude ~ (cell size)**slope: lower = busier texture
_CONTRAST_RANGE = (25.0, 60.0)  # luma texture standard deviation, in 8-bit levels
_FINE_RANGE = (15.0, 45.0)  # fine detail (foliage, fur, grain) standard deviation, where present
_SENSOR_NOISE_RANGE = (1.5, 4.0)  # per-channel white noise standard deviation
_SHAPES_RANGE = (2, 8)  # large shapes (objects)
_CLUTTER_RANGE = (0, 120)  # small shapes (clutter, details)


@dataclass(frozen=True)
class ImageSpec:
    """Everything about one image except its pixels: index, size, JPEG quality and progressive
    flag, whether it is a PNG and/or grayscale, and a small ``name_offset`` (0-6) that makes the
    file numbers irregular."""

    index: int
    width: int
    height: int
    quality: int
    progressive: bool
    png: bool
    gray: bool
    name_offset: int


@dataclass(frozen=True)
class _Job:
    out: str
    seed: int
    class_names: tuple[str, ...]
    png_fraction: float
    gray_fraction: float
    profile: str = "imagenet"


def class_names(num_classes: int, seed: int = 0) -> list[str]:
    """Make ``num_classes`` distinct WordNet-like ids (``n01440764``), sorted.

    Args:
        num_classes: How many names.
        seed: Seed; the same seed always gives the same names.

    Returns:
        The sorted names.
    """
    rng = np.random.default_rng([seed, 0x5EED_C1A5])
    names: set[str] = set()
    while len(names) < num_classes:
        for value in rng.integers(1_000_000, 15_000_000, size=num_classes - len(names)):
            names.add(f"n{int(value):08d}")
    return sorted(names)


def _weyl_pick(seed: int, index: int, salt: int, alpha: float, fraction: float) -> bool:
    """Low-discrepancy pick: over any run of indices the share picked is close to ``fraction``."""
    offset = np.random.default_rng([seed, salt]).random()
    return bool(((index + 1) * alpha + offset) % 1.0 < fraction)


def _sample_size(rng: np.random.Generator, profile: str = "imagenet") -> tuple[int, int]:
    u = rng.random()
    if profile == "photos":
        long = int(rng.integers(*_PHOTO_LONG_RANGE))
    elif u < _P_LONG_500:
        long = 500
    elif u < _P_LONG_500 + _P_SMALL:
        long = int(rng.integers(_SMALL_MIN, 500))
    else:
        lo, hi = _LARGE_RANGE
        long = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
    orient, kind = rng.random(2)
    if orient < _P_SQUARE:
        return long, long
    aspect = 4 / 3 if kind < 0.55 else 3 / 2 if kind < 0.8 else rng.uniform(1.05, 1.95)
    short = max(1, int(round(long / aspect)))
    return (short, long) if orient > 1.0 - _P_PORTRAIT else (long, short)


def image_spec(
    seed: int, index: int, *, png_fraction: float = 0.01, gray_fraction: float = 0.02, profile: str = "imagenet"
) -> ImageSpec:
    """Draw the size, encoding and kind of image ``index``.

    Args:
        seed: Data-set seed.
        index: Image index.
        png_fraction: Fraction of images stored as PNG.
        gray_fraction: Fraction of single-channel images.
        profile: Size profile, one of :data:`PROFILES`.

    Returns:
        The image's :class:`ImageSpec`.
    """
    rng = np.random.default_rng([seed, index, 1])
    width, height = _sample_size(rng, profile)
    qualities, weights = (_PHOTO_QUALITIES, _PHOTO_QUALITY_P) if profile == "photos" else (_QUALITIES, _QUALITY_P)
    quality = int(rng.choice(qualities, p=weights))
    progressive = bool(rng.random() < _P_PROGRESSIVE)
    png = _weyl_pick(seed, index, 0x0FF5E7, _PNG_ALPHA, png_fraction)
    gray = _weyl_pick(seed, index, 0x6A4, _GRAY_ALPHA, gray_fraction)
    name_offset = int(rng.integers(7))
    return ImageSpec(index, width, height, quality, progressive, png, gray, name_offset)


def _uniform_noise(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Zero-mean, unit-variance uniform noise, as float32 (several times faster than normals)."""
    raw = np.frombuffer(rng.bytes(math.prod(shape)), np.int8).reshape(shape)
    return raw.astype(np.float32) * np.float32(1 / 73.9)


def _octave_noise(
    rng: np.random.Generator, height: int, width: int, slope: float, finest: int = 1, coarsest: int = 1 << 30
) -> np.ndarray:
    """Value noise summed over octaves (cell sizes ``finest``, 2x, 4x, ... up to the image size or ``coarsest``).

    An octave with cell size ``c`` has amplitude ``(c / size) ** slope``: ``slope`` 0 gives the
    1/f amplitude spectrum of natural images, larger values a smoother picture. The result is
    normalized to zero mean and unit standard deviation.
    """
    size = max(height, width)
    cells = [finest]
    while cells[-1] < min(size, coarsest):
        cells.append(cells[-1] * 2)
    acc = None
    for cell in reversed(cells):
        grid = (-(-height // cell) + 1, -(-width // cell) + 1)
        layer = _uniform_noise(rng, grid)
        layer *= np.float32((cell / size) ** slope)
        if acc is not None:
            layer += cv2.resize(acc, (grid[1], grid[0]), interpolation=cv2.INTER_LINEAR)
        acc = layer
    if finest > 1:
        acc = cv2.resize(acc, (acc.shape[1] * finest, acc.shape[0] * finest), interpolation=cv2.INTER_CUBIC)
    out = np.ascontiguousarray(acc[:height, :width])
    mean, std = cv2.meanStdDev(out)
    out -= np.float32(mean[0, 0])
    out *= np.float32(1.0 / (std[0, 0] + 1e-6))
    return out


def _shape_polygon(rng: np.random.Generator, height: int, width: int, scale: float) -> np.ndarray:
    """Outline of an ellipse, a rotated rectangle or an irregular polygon, as int32 points."""
    center = (rng.uniform(-0.1, 1.1) * width, rng.uniform(-0.1, 1.1) * height)
    radius = max(scale * max(height, width), 2.0)
    angle = rng.uniform(0, 180)
    kind = rng.integers(3)
    if kind == 0:
        axes = (int(radius), max(int(radius * rng.uniform(0.3, 1.0)), 1))
        return cv2.ellipse2Poly((int(center[0]), int(center[1])), axes, int(angle), 0, 360, 4)
    if kind == 1:
        box = (center, (2 * radius, 2 * radius * rng.uniform(0.2, 1.0)), angle)
        return cv2.boxPoints(box).astype(np.int32)
    count = int(rng.integers(3, 9))
    theta = np.sort(rng.uniform(0, 2 * np.pi, count))
    rad = radius * rng.uniform(0.4, 1.0, count)
    return np.stack([center[0] + rad * np.cos(theta), center[1] + rad * np.sin(theta)], 1).astype(np.int32)


def _draw_shape(rng: np.random.Generator, planes: list[np.ndarray], scale: float, contrast: float, fine: float) -> None:
    """Composite one anti-aliased shape (own colour, shading and texture strength) in place.

    ``planes``: Y, Cr, Cb and the amplitudes of the texture and of the fine detail, float32 ``(H, W)``.
    """
    height, width = planes[0].shape
    pts = _shape_polygon(rng, height, width, scale)
    values = (
        rng.uniform(15, 240),
        rng.normal(0, 22),
        rng.normal(0, 22),
        contrast * rng.uniform(0.15, 1.4),
        fine * rng.uniform(0.3, 1.6) * (rng.random() > 0.4),
    )
    shading = np.float32(rng.normal(0, 30))
    x, y, w, h = cv2.boundingRect(pts)
    x0, y0, x1, y1 = max(x - 1, 0), max(y - 1, 0), min(x + w + 1, width), min(y + h + 1, height)
    if x1 - x0 < 2 or y1 - y0 < 2:
        return
    mask = np.zeros((y1 - y0, x1 - x0), np.uint8)
    cv2.fillPoly(mask, [pts - np.array([x0, y0], np.int32)], 255, lineType=cv2.LINE_AA)
    alpha = mask.astype(np.float32)
    alpha *= np.float32(1 / 255)
    ramp = np.linspace(-0.5, 0.5, y1 - y0, dtype=np.float32)[:, None] * shading
    for plane, value in zip(planes, values, strict=True):
        roi = plane[y0:y1, x0:x1]
        target = np.float32(value) + ramp if plane is planes[0] else np.float32(value)
        roi += alpha * (target - roi)


def _draw_clutter(rng: np.random.Generator, planes: list[np.ndarray], count: int, contrast: float, fine: float) -> None:
    """Paint ``count`` (at most 255) small flat ellipses and boxes at once through a label map.

    Fast (parameters drawn in bulk, one table lookup per plane); the edges are aliased.
    """
    height, width = planes[0].shape
    label = np.zeros((height, width), np.uint8)
    size = max(height, width)
    geometry = rng.random((count, 6)) * [1.2 * width, 1.2 * height, 0.045 * size, 0.8, 180, 1]
    for k, (x, y, radius, squash, angle, kind) in enumerate(geometry, start=1):
        center, radius = (x - 0.1 * width, y - 0.1 * height), radius + 0.005 * size + 1
        if kind < 0.5:
            axes = (int(radius), int(radius * (squash + 0.2)))
            cv2.ellipse(label, (int(center[0]), int(center[1])), axes, angle, 0, 360, k, -1)
        else:
            box = cv2.boxPoints((center, (2 * radius, 2 * radius * (squash + 0.2)), angle))
            cv2.fillConvexPoly(label, box.astype(np.int32), k)
    table = np.zeros((len(planes), 256), np.float32)
    table[:, 1 : count + 1] = (
        rng.uniform(15, 240, count),
        rng.normal(0, 22, count),
        rng.normal(0, 22, count),
        contrast * rng.uniform(0.15, 1.4, count),
        fine * rng.uniform(0.3, 1.6, count) * (rng.random(count) > 0.4),
    )
    mask = label > 0
    for plane, row in zip(planes, table, strict=True):
        np.copyto(plane, cv2.LUT(label, row[None, :]), where=mask)


# Y, Cr, Cb (Cr/Cb centred on 0) to B, G, R (BT.601 full range).
_YCC_TO_BGR = np.array([[1.0, 0.0, 1.772], [1.0, -0.714136, -0.344136], [1.0, 1.402, 0.0]], np.float32)


def _background(rng: np.random.Generator, height: int, width: int, contrast: float, fine: float) -> list[np.ndarray]:
    """Y (lit by a gradient and soft shadows), smooth Cr/Cb fields and two texture-amplitude planes."""
    yy = np.linspace(-0.5, 0.5, height, dtype=np.float32)[:, None]
    xx = np.linspace(-0.5, 0.5, width, dtype=np.float32)[None, :]
    gx, gy = rng.normal(0, 40, 2).astype(np.float32)
    luma = _octave_noise(rng, height, width, 1.0, finest=16) * np.float32(rng.uniform(8, 35))
    luma += np.float32(rng.uniform(70, 180)) + gx * xx + gy * yy
    chroma = _octave_noise(rng, height, width * 2, 0.6, finest=8)  # the two fields side by side
    planes = [luma]
    for c in range(2):
        field = chroma[:, c * width : (c + 1) * width] * np.float32(rng.uniform(3, 14))
        planes.append(np.ascontiguousarray(field + np.float32(rng.normal(0, 12))))
    planes.append(np.full((height, width), contrast, np.float32))
    planes.append(np.full((height, width), fine * rng.uniform(0, 1.2), np.float32))
    return planes


def render_image(rng: np.random.Generator, width: int, height: int, *, gray: bool = False) -> np.ndarray:
    """Paint a photo-like picture: illumination, 1/f texture, sharp shapes, correlated colour.

    Args:
        rng: Random generator; the picture depends only on its state.
        width: Width in pixels.
        height: Height in pixels.
        gray: Return a single-channel picture.

    Returns:
        ``uint8`` array, ``(height, width, 3)`` BGR, or ``(height, width)`` when ``gray``.
    """
    slope = rng.uniform(*_SLOPE_RANGE)
    contrast, fine = rng.uniform(*_CONTRAST_RANGE), rng.uniform(*_FINE_RANGE)
    noise_sigma = np.float32(rng.uniform(*_SENSOR_NOISE_RANGE))
    planes = _background(rng, height, width, contrast, fine)
    for _ in range(int(rng.integers(*_SHAPES_RANGE))):
        _draw_shape(rng, planes, rng.uniform(0.06, 0.45), contrast, fine)
    _draw_clutter(rng, planes, int(rng.integers(*_CLUTTER_RANGE)), contrast, fine)
    luma, cr, cb, amp, amp_fine = planes
    texture = _octave_noise(rng, height, width, slope)
    texture *= amp
    texture += _octave_noise(rng, height, width, 0.0, coarsest=4) * amp_fine
    luma += texture
    if gray:
        out = luma + _uniform_noise(rng, (height, width)) * noise_sigma
    else:
        rho = rng.normal(0, 0.12, 2).astype(np.float32)
        cr += texture * rho[0]
        cb += texture * rho[1]
        out = cv2.transform(cv2.merge([luma, cr, cb]), _YCC_TO_BGR)
        out += _uniform_noise(rng, (height, width, 3)) * noise_sigma
    np.maximum(out, 0, out=out)
    return cv2.convertScaleAbs(out)


def encode_image(image: np.ndarray, spec: ImageSpec) -> bytes:
    """Encode as PNG or as JPEG (4:2:0, quality and progressive from ``spec``)."""
    if spec.png:
        ok, buf = cv2.imencode(".png", image, [cv2.IMWRITE_PNG_COMPRESSION, 1])
    else:
        params = [
            cv2.IMWRITE_JPEG_QUALITY,
            spec.quality,
            cv2.IMWRITE_JPEG_SAMPLING_FACTOR,
            cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420,
            cv2.IMWRITE_JPEG_PROGRESSIVE,
            int(spec.progressive),
        ]
        ok, buf = cv2.imencode(".jpg", image, params)
    if not ok:
        raise RuntimeError(f"cv2.imencode failed for image {spec.index}")
    return buf.tobytes()


def make_image(
    seed: int, index: int, *, png_fraction: float = 0.01, gray_fraction: float = 0.02, profile: str = "imagenet"
) -> tuple[ImageSpec, bytes]:
    """Make the encoded bytes of image ``index``; a pure function of its arguments.

    Args:
        seed: Data-set seed.
        index: Image index.
        png_fraction: Fraction of images stored as PNG.
        gray_fraction: Fraction of single-channel images.
        profile: Size profile, one of :data:`PROFILES`.

    Returns:
        ``(spec, data)``: the image's :class:`ImageSpec` and its file contents.
    """
    spec = image_spec(seed, index, png_fraction=png_fraction, gray_fraction=gray_fraction, profile=profile)
    rng = np.random.default_rng([seed, index, 2])
    if profile == "photos":  # camera images are smoother per pixel: render at half size, upscale
        half = render_image(rng, (spec.width + 1) // 2, (spec.height + 1) // 2, gray=spec.gray)
        pixels = cv2.resize(half, (spec.width, spec.height), interpolation=cv2.INTER_CUBIC)
    else:
        pixels = render_image(rng, spec.width, spec.height, gray=spec.gray)
    return spec, encode_image(pixels, spec)


def file_name(spec: ImageSpec, names: list[str] | tuple[str, ...]) -> str:
    """Relative path of an image: ``<wnid>/<wnid>_<number>.JPEG`` (or ``.png``).

    Image ``i`` goes to class ``i % len(names)``; numbers are unique within a class.
    """
    wnid = names[spec.index % len(names)]
    number = (spec.index // len(names)) * 7 + spec.name_offset + 1
    return f"{wnid}/{wnid}_{number}.{'png' if spec.png else 'JPEG'}"


# --- parallel driver ----------------------------------------------------------------------

_JOB: _Job | None = None  # set in each worker by _init_worker


def _init_worker(job: _Job) -> None:
    global _JOB
    _JOB = job
    cv2.setNumThreads(1)  # one process per core already; threads inside would oversubscribe


def _write_one(index: int) -> tuple[int, int, int, bool, bool]:
    job = _JOB
    if job is None:
        raise RuntimeError("_write_one called outside a worker (missing _init_worker)")
    spec, data = make_image(
        job.seed, index, png_fraction=job.png_fraction, gray_fraction=job.gray_fraction, profile=job.profile
    )
    (Path(job.out) / file_name(spec, job.class_names)).write_bytes(data)
    return spec.width, spec.height, len(data), spec.png, spec.gray


def _run(job: _Job, num_images: int, workers: int, progress: bool) -> list[tuple[int, int, int, bool, bool]]:
    """Make every image, in this process (``workers == 1``) or in a pool; records in index order."""
    from tqdm import tqdm

    with contextlib.ExitStack() as stack:
        if workers == 1:
            stack.callback(cv2.setNumThreads, cv2.getNumThreads())
            _init_worker(job)
            results = map(_write_one, range(num_images))
        else:
            pool = stack.enter_context(multiprocessing.Pool(workers, _init_worker, (job,)))
            chunksize = max(1, min(32, num_images // (8 * workers)))
            results = pool.imap(_write_one, range(num_images), chunksize=chunksize)
        bar = tqdm(results, total=num_images, unit="img", desc="generating", disable=not progress, smoothing=0.1)
        return list(bar)


def _check(name: str, value: object, low: float, high: float = math.inf, kind: type = int) -> int | float:
    """``value`` as ``kind`` when it lies in ``[low, high]``, else a TypeError/ValueError naming it."""
    types = (int, np.integer) if kind is int else (int, float, np.integer, np.floating)
    if isinstance(value, bool) or not isinstance(value, types):
        raise TypeError(f"{name} must be {kind.__name__}, got {type(value).__name__} {value!r}")
    if not low <= value <= high:
        bound = f">= {low}" if high == math.inf else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {bound}, got {value!r}; pass a value {bound}")
    return kind(value)


def _prepare_out(out: Path, overwrite: bool) -> None:
    """Make sure ``out`` is an empty folder; with ``overwrite``, clear a previous output first."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"output {str(out)!r} exists and is not a folder; choose another path")
    entries = sorted(out.iterdir()) if out.exists() else []
    if entries and not overwrite:
        raise FileExistsError(
            f"output folder {str(out)!r} is not empty; pass --overwrite (overwrite=True) to replace it "
            "or choose an empty folder"
        )
    foreign = [p.name for p in entries if not (p.is_dir() and CLASS_NAME_RE.match(p.name))]
    if foreign:
        raise FileExistsError(
            f"output folder {str(out)!r} holds entries this tool did not write ({', '.join(foreign[:3])}"
            f"{', ...' if len(foreign) > 3 else ''}); --overwrite only replaces class folders like n01440764, "
            "so remove them yourself or choose an empty folder"
        )
    for path in entries:
        shutil.rmtree(path)
    out.mkdir(parents=True, exist_ok=True)


def _summarize(records: list[tuple[int, int, int, bool, bool]], seconds: float) -> dict:
    table = np.array([r[:3] for r in records], np.float64)
    widths, heights, sizes = table[:, 0], table[:, 1], table[:, 2]
    return {
        "count": len(records),
        "mean_width": float(widths.mean()),
        "mean_height": float(heights.mean()),
        "median_width": float(np.median(widths)),
        "median_height": float(np.median(heights)),
        "mean_kb": float(sizes.mean() / 1024),
        "total_mb": float(sizes.sum() / 1024**2),
        "png_fraction": sum(r[3] for r in records) / len(records),
        "gray_fraction": sum(r[4] for r in records) / len(records),
        "seconds": seconds,
        "images_per_s": len(records) / seconds if seconds > 0 else float("inf"),
    }


def generate(
    out: str | os.PathLike,
    *,
    num_images: int,
    num_classes: int,
    seed: int = 0,
    workers: int | None = None,
    png_fraction: float = 0.01,
    gray_fraction: float = 0.02,
    progress: bool = True,
    overwrite: bool = False,
    profile: str = "imagenet",
) -> dict:
    """Write a synthetic ImageNet-like ImageFolder tree to ``out``.

    Args:
        out: Output folder; must be missing or empty (see ``overwrite``).
        num_images: Number of images, at least ``num_classes``.
        num_classes: Number of class folders; image ``i`` goes to class ``i % num_classes``.
        seed: Seed; the output is a pure function of the seed and the counts.
        workers: Worker processes; ``None`` uses all cores. Does not change the output.
        png_fraction: Fraction of images stored as PNG.
        gray_fraction: Fraction of single-channel (grayscale) images.
        progress: Show a tqdm progress bar.
        overwrite: Replace the class folders of a previous run in ``out``.
        profile: Size profile: ``"imagenet"`` (mean about 470x390) or ``"photos"`` (large photos, mean
            about 1650x1200).

    Returns:
        Statistics: ``count``, ``mean_width``, ``mean_height``, ``median_width``,
        ``median_height``, ``mean_kb`` (KiB), ``total_mb`` (MiB), ``png_fraction``,
        ``gray_fraction``, ``seconds`` and ``images_per_s``.

    Raises:
        TypeError: A count is not an int.
        ValueError: A count or fraction is out of range.
        FileExistsError: ``out`` is not empty and ``overwrite`` is false, or holds foreign files.
        NotADirectoryError: ``out`` is a file.
    """
    num_images = _check("num_images", num_images, 1)
    num_classes = _check("num_classes (at most num_images)", num_classes, 1, num_images)
    seed = _check("seed", seed, 0)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = cores if workers is None else _check("workers", workers, 1)
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    job = _Job(
        os.fspath(out),
        seed,
        tuple(class_names(num_classes, seed)),
        _check("png_fraction", png_fraction, 0, 1, float),
        _check("gray_fraction", gray_fraction, 0, 1, float),
        profile,
    )
    _prepare_out(Path(out), overwrite)
    for name in job.class_names:
        (Path(out) / name).mkdir()
    start = time.perf_counter()
    records = _run(job, num_images, min(workers, num_images), progress)
    stats = _summarize(records, time.perf_counter() - start)
    logger.info("wrote %d images to %s", stats["count"], out)
    return stats


def format_stats(stats: dict) -> str:
    """One line of statistics, as printed by the command line."""
    return (
        f"{stats['count']} images in {stats['seconds']:.1f} s ({stats['images_per_s']:.0f} img/s): "
        f"mean {stats['mean_width']:.0f}x{stats['mean_height']:.0f} px "
        f"(median {stats['median_width']:.0f}x{stats['median_height']:.0f}), "
        f"mean {stats['mean_kb']:.1f} KB, total {stats['total_mb']:.1f} MB, "
        f"png {stats['png_fraction']:.1%}, gray {stats['gray_fraction']:.1%}"
    )


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="make_imagenet_like.py",
        description="Write a realistic synthetic ImageNet-like ImageFolder tree (deterministic, parallel).",
    )
    parser.add_argument("out", help="output folder (missing or empty)")
    parser.add_argument("--num-images", type=int, default=10000, help="number of images (default 10000)")
    parser.add_argument("--num-classes", type=int, default=100, help="number of classes (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    parser.add_argument("--workers", type=int, default=None, help="worker processes (default: all cores)")
    parser.add_argument("--png-fraction", type=float, default=0.01, help="fraction of PNGs (default 0.01)")
    parser.add_argument("--gray-fraction", type=float, default=0.02, help="fraction of grayscale (default 0.02)")
    parser.add_argument(
        "--profile",
        choices=PROFILES,
        default="imagenet",
        help="image sizes: imagenet (mean ~470x390, default) or photos (mean ~1650x1200)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace the class folders of a previous run")
    parser.add_argument("--quiet", action="store_true", help="no progress bar (the statistics line is kept)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    args = _parse_args(argv)
    try:
        stats = generate(
            args.out,
            num_images=args.num_images,
            num_classes=args.num_classes,
            seed=args.seed,
            workers=args.workers,
            png_fraction=args.png_fraction,
            gray_fraction=args.gray_fraction,
            progress=not args.quiet,
            overwrite=args.overwrite,
            profile=args.profile,
        )
    except (TypeError, ValueError, OSError) as exc:
        print(f"make_imagenet_like.py: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("make_imagenet_like.py: interrupted", file=sys.stderr)
        return 130
    print(format_stats(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
