"""Where the CPU time goes: per-stage timings of each pipeline over the same sample of images.

The breakdown runs every stage of a pipeline in this process, on one thread, over the same sample
of images, and times each stage separately (nothing is estimated). GPU idle time while training is
measured in :mod:`fastdata.bench.gpu_training`.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

from fastdata.bench.baselines import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    CV2RandomResizedCropFlip,
    PILRandomHorizontalFlip,
    PILRandomResizedCrop,
    PILToNormalizedTensor,
    cv2_decode_bgr,
    uint8_collate,
)
from fastdata.bench.measure import RESAMPLE
from fastdata.decode import Decoder, choose_scale, get_decoder

logger = logging.getLogger(__name__)

__all__ = ["measure_breakdown"]

Stage = tuple[str, Callable[[Any], Any]]


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    torch_threads, cv2_threads = torch.get_num_threads(), cv2.getNumThreads()
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    try:
        yield
    finally:
        torch.set_num_threads(torch_threads)
        cv2.setNumThreads(cv2_threads)


def _chain(items: Sequence[Any], stages: Sequence[Stage]) -> tuple[list[dict[str, Any]], list[Any]]:
    """Push every item through the stages in order, timing each stage; return per-image ms and outputs."""
    totals = np.zeros(len(stages))
    outputs = []
    for item in items:
        value = item
        for k, (_, fn) in enumerate(stages):
            start = time.perf_counter()
            value = fn(value)
            totals[k] += time.perf_counter() - start
        outputs.append(value)
    timings = [{"stage": name, "ms_per_image": 1e3 * totals[k] / len(items)} for k, (name, _) in enumerate(stages)]
    return timings, outputs


def _batched(name: str, fn: Callable[[list], Any], samples: Sequence[Any], batch_size: int) -> tuple[dict, list]:
    """Time ``fn`` over consecutive batches of ``(sample, label)`` pairs; per-image ms and the results."""
    labels = np.random.default_rng(0).integers(0, 1000, len(samples)).tolist()
    total, results = 0.0, []
    for start in range(0, len(samples), batch_size):
        chunk = list(zip(samples[start : start + batch_size], labels[start : start + batch_size], strict=False))
        t = time.perf_counter()
        results.append(fn(chunk))
        total += time.perf_counter() - t
    return {"stage": name, "ms_per_image": 1e3 * total / len(samples)}, results


def _part(stages: list[dict[str, Any]], samples: int, note: str, **extra: Any) -> dict[str, Any]:
    return {
        "samples": samples,
        "stages": stages,
        "total_ms": sum(s["ms_per_image"] for s in stages),
        "note": note,
        **extra,
    }


class _TimedDecoder(Decoder):
    """Wraps a decoder: times ``read_size`` and ``decode`` and records the DCT scales and pixels."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.scales = inner, inner.name, inner.scales
        self.header_s = self.decode_s = self.region_s = 0.0
        self.scale_counts: Counter[str] = Counter()
        self.full_pixels = self.decoded_pixels = 0

    def read_size(self, data: bytes) -> tuple[int, int] | None:
        start = time.perf_counter()
        size = self.inner.read_size(data)
        self.header_s += time.perf_counter() - start
        if size is not None:
            self.full_pixels += size[0] * size[1]
        return size

    def decode(self, data: bytes, *, scale: tuple[int, int] = (1, 1)) -> np.ndarray:
        start = time.perf_counter()
        image = self.inner.decode(data, scale=scale)
        self.decode_s += time.perf_counter() - start
        self.scale_counts[f"{scale[0]}/{scale[1]}"] += 1
        self.decoded_pixels += image.shape[0] * image.shape[1]
        return image

    def decode_crop_into(self, data: bytes, box: Any, out: np.ndarray, **resample: Any) -> None:
        if type(self.inner).decode_crop_into is Decoder.decode_crop_into:  # decode + crop + resize: time the decode
            super().decode_crop_into(data, box, out, **resample)
            return
        start = time.perf_counter()  # a region decoder: decode and resize are one call
        self.inner.decode_crop_into(data, box, out, **resample)
        self.region_s += time.perf_counter() - start
        scale = choose_scale(self.scales, box[2], box[3], *out.shape[:2])
        self.scale_counts[f"{scale[0]}/{scale[1]}"] += 1
        self.decoded_pixels += box[2] * box[3] * scale[0] ** 2 // scale[1] ** 2

    def validate(self, data: bytes) -> tuple[int, int]:
        return self.inner.validate(data)


def _timed_transform(size: int) -> tuple[Any, _TimedDecoder]:
    """``fastdata.transforms.RandomResizedCrop(size, resample=RESAMPLE)`` running on a timed decoder."""
    from fastdata.transforms import RandomResizedCrop

    timed = _TimedDecoder(get_decoder("auto"))
    return RandomResizedCrop(size, decoder=timed, resample=RESAMPLE), timed


def _fastdata_part(roots: dict[str, Path], picks: np.ndarray, size: int, batch_size: int) -> tuple[dict, list[bytes]]:
    """Time read, header, decode, crop/resize (the rest of the transform), collate, flip + normalize."""
    from fastdata.datasets.shard_dataset import ShardDataset
    from fastdata.decode.batch import DecodedBatch
    from fastdata.gpu_transforms import Compose, Normalize, RandomHorizontalFlip
    from fastdata.loader.collate import fast_collate

    def read_stage(dataset: ShardDataset) -> Stage:
        return "read", lambda i: dataset.read(i)[0]  # the record's encoded bytes

    reads, payloads = {}, {}
    for fmt in ("tfrecord", "lmdb"):
        if fmt in roots:
            timing, payloads[fmt] = _chain([int(i) for i in picks], [read_stage(ShardDataset(roots[fmt]))])
            reads[fmt] = timing[0]["ms_per_image"]
    fmt = "tfrecord" if "tfrecord" in payloads else next(iter(payloads))
    data, n = payloads[fmt], len(payloads[fmt])
    rrc, timed = _timed_transform(size)
    (whole,), crops = _chain(data, [("transform", rrc)])
    header, decode, region = (1e3 * t / n for t in (timed.header_s, timed.decode_s, timed.region_s))
    stages = [
        {"stage": f"read record ({fmt})", "ms_per_image": reads[fmt]},
        {"stage": "header (read_size)", "ms_per_image": header},
    ]
    if region:  # the native kernel decodes only the crop's region and resizes it in one call
        stages += [
            {"stage": f"decode crop region + resize ({timed.name})", "ms_per_image": region},
            {"stage": "crop params", "ms_per_image": whole["ms_per_image"] - header - region},
        ]
    else:
        stages += [
            {"stage": "decode (DCT-scaled)", "ms_per_image": decode},
            {"stage": "crop params + crop + resize (cv2)", "ms_per_image": whole["ms_per_image"] - header - decode},
        ]
    collate, batches = _batched("fast_collate (uint8 NCHW)", fast_collate, crops, batch_size)
    norm = Compose([RandomHorizontalFlip(), Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    start = time.perf_counter()
    for images, labels in batches:
        norm(images, labels)
    torch_ops_ms = 1e3 * (time.perf_counter() - start) / n  # what DataPrefetcher's transform costs on the CPU
    in_place = [DecodedBatch(images.permute(0, 2, 3, 1).contiguous(), labels) for images, labels in batches]
    fresh_ms = _normalize_collate_ms(in_place, reuse=False)
    worker_norm = {
        "stage": "flip + normalize (CPU, NormalizeCollate in workers, ring buffers)",
        "ms_per_image": _normalize_collate_ms(in_place, reuse=True),
    }
    stages += [collate, worker_norm]
    extra = {
        "transform_end_to_end_ms": whole["ms_per_image"],
        "read_ms": reads,
        "cpu_flip_normalize_torch_ops_ms": torch_ops_ms,
        "cpu_flip_normalize_fresh_memory_ms": fresh_ms,
        "full_decode_ms": _chain(data, [("full", timed.inner.decode)])[0][0]["ms_per_image"],
        "dct_scales": {k: round(v / n, 3) for k, v in sorted(timed.scale_counts.items())},
        "mean_full_megapixels": timed.full_pixels / n / 1e6,
        "mean_decoded_megapixels": timed.decoded_pixels / n / 1e6,
    }
    if torch.cuda.is_available():
        extra["gpu_h2d_normalize_ms"] = _gpu_normalize_ms(batches, norm)
    note = f"the {fmt} read in the total (reads of every format in read_ms); full_decode_ms: without DCT scaling"
    return _part(stages, n, note, **extra), data


def _normalize_collate_ms(batches: list, *, reuse: bool) -> float:
    """Per-image ms of ``NormalizeCollate`` (flip + normalize to float) over decoded batches.

    ``reuse``: the output goes to memory written before, as in a worker whose ring segment came back
    (:mod:`fastdata.decode.shared_ring`); else to fresh memory each batch (page faults included).
    """
    from unittest import mock

    import fastdata.loader.collate as collate_module
    from fastdata.loader.collate import NormalizeCollate

    to_float = NormalizeCollate(IMAGENET_MEAN, IMAGENET_STD, hflip_p=0.5)
    buffers: dict[tuple, torch.Tensor] = {}

    def reused(shape, dtype):
        key = (tuple(shape), dtype)
        if key not in buffers:
            buffers[key] = torch.zeros(key[0], dtype=dtype)  # touched once, before the clock runs
        return buffers[key]

    with mock.patch.object(collate_module, "empty_tensor", reused) if reuse else contextlib.nullcontext():
        if reuse:
            to_float(batches[0])  # the warm-up that allocates the buffer
        start = time.perf_counter()
        for batch in batches:
            to_float(batch)
        seconds = time.perf_counter() - start
    return 1e3 * seconds / sum(len(b) for b in batches)


def _gpu_normalize_ms(batches: list[tuple[torch.Tensor, torch.Tensor]], norm: Callable) -> float:
    """Per-image ms of the pinned H2D copy + flip + normalize on the GPU (synchronized)."""
    device = torch.device("cuda")
    pinned = [(images.pin_memory(), labels.pin_memory()) for images, labels in batches]
    norm(pinned[0][0].to(device), pinned[0][1].to(device))  # warm-up: kernels, cached constants
    torch.cuda.synchronize()
    start = time.perf_counter()
    for images, labels in pinned:
        norm(images.to(device, non_blocking=True), labels.to(device, non_blocking=True))
    torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - start) / sum(len(labels) for _, labels in pinned)


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _pil_decode(data: bytes) -> Any:
    from PIL import Image

    return Image.open(io.BytesIO(data)).convert("RGB")


def _baseline_parts(files: Sequence[str], size: int, batch_size: int) -> dict[str, dict[str, Any]]:
    from torch.utils.data import default_collate

    stages, tensors = _chain(
        files,
        [
            ("read file", _read_file),
            ("decode (PIL open + convert RGB)", _pil_decode),
            ("crop + resize (PIL BILINEAR)", PILRandomResizedCrop(size)),
            ("flip (PIL transpose)", PILRandomHorizontalFlip()),
            ("ToTensor + Normalize", PILToNormalizedTensor()),
        ],
    )
    stages.append(_batched("default_collate (float)", default_collate, tensors, batch_size)[0])
    parts = {"torch-pil": _part(stages, len(files), "in the DataLoader workers")}
    stages, crops = _chain(
        files,
        [
            ("read file", _read_file),
            ("decode (cv2.imdecode, BGR)", cv2_decode_bgr),
            ("crop + resize + BGR2RGB + flip (cv2)", CV2RandomResizedCropFlip(size)),
        ],
    )
    stages.append(_batched("uint8 collate (one stack, channels_last)", uint8_collate, crops, batch_size)[0])
    parts["torch-cv2"] = _part(stages, len(files), "in the DataLoader workers")
    return parts


def measure_breakdown(
    roots: dict[str, Path], files: Sequence[str], *, size: int = 224, samples: int = 500, batch_size: int = 256
) -> dict[str, Any]:
    """Per-stage CPU time per image of fastdata's pipeline and of the two reference pipelines.

    Args:
        roots: ``{format: packed folder}`` of the same images as ``files``.
        files: absolute paths of the packed folder's images; the reference pipelines are timed on
            the files whose bytes match the sampled records (evenly spaced files if none match).
        size: crop size.
        samples: records to time (evenly spaced over the packed dataset).
        batch_size: batch size of the collate and normalize stages.

    Returns:
        ``{"fastdata": {...}, "torch-pil": {...}, "torch-cv2": {...}}``, each with ``stages``
        (``stage``, ``ms_per_image``), ``total_ms``, ``samples`` and notes; fastdata's also has the
        DCT scales chosen, the decoded vs full megapixels and the cost of a full-size decode.
    """
    from fastdata.formats.manifest import Manifest

    count = min([len(files)] + [Manifest.load(root).num_samples for root in roots.values()])
    picks = np.unique(np.linspace(0, count - 1, min(samples, count)).astype(int))
    batch_size = max(1, min(batch_size, len(picks)))
    with _one_thread():
        torch.manual_seed(0)
        part, payloads = _fastdata_part(roots, picks, size, batch_size)
        matched = [m for m in _match_files(payloads, files, _record_names(roots, picks)) if m is not None]
        same = len(matched) == len(payloads)
        part["baselines_on_same_images"] = same
        baseline_files = matched if same else [files[i] for i in picks]
        return {"fastdata": part, **_baseline_parts(baseline_files, size, batch_size)}


def _match_files(payloads: Sequence[bytes], files: Sequence[str], names: Sequence[str]) -> list[str | None]:
    """The source file of each packed record.

    Same bytes, else the file the record names (a JPEG pack re-coded
    losslessly: same pixels), or None where neither matches (a re-encoded pack).
    """
    by_size: dict[int, list[str]] = {}
    for path in files:
        by_size.setdefault(os.stat(path).st_size, []).append(path)
    by_name = {Path(p).as_posix(): p for p in files}
    found: list[str | None] = []
    for k, data in enumerate(payloads):
        same = next((p for p in by_size.get(len(data), []) if _read_file(p) == data), None)
        named = [p for rel in names[k : k + 1] if rel for key, p in by_name.items() if key.endswith("/" + rel)]
        found.append(same or (named[0] if len(named) == 1 else None))
    return found


def _record_names(roots: dict[str, Path], picks: np.ndarray) -> list[str]:
    """``image/filename`` (relative to the packed folder) of the picked TFRecord records; [] without TFRecord."""
    from fastdata.formats.example import decode_example
    from fastdata.formats.packed import open_pack
    from fastdata.formats.tfrecord import TFRecordShardReader

    if "tfrecord" not in roots:
        return []
    pack = open_pack(roots["tfrecord"])
    shard_of, starts = np.searchsorted(pack.starts, picks, side="right") - 1, pack.starts
    readers = {
        int(s): (TFRecordShardReader(Path(pack.shard_paths[s])), *pack.locate(int(s))) for s in np.unique(shard_of)
    }
    names = [
        decode_example(
            readers[int(s)][0].read_payload(
                int(readers[int(s)][1][i - starts[s]]), int(readers[int(s)][2][i - starts[s]])
            )
        ).filename
        for i, s in zip(picks, shard_of, strict=False)
    ]
    for reader, _, _ in readers.values():
        reader.close()
    return names
