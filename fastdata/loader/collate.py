"""Collate uint8 HWC samples into a uint8 NCHW batch with at most one copy of the pixels.

:func:`fast_collate` does no float math: conversion to float and normalization happen later on the
GPU (see :mod:`fastdata.loader.prefetcher` and :mod:`fastdata.gpu_transforms`). On a CPU-only machine,
:class:`NormalizeCollate` makes the normalized float batch in the workers instead. Inside a DataLoader worker
the batch is allocated directly in shared memory, the way :func:`torch.utils.data.default_collate`
does, so sending it to the main process does not copy it again.
"""

from __future__ import annotations

import logging
import operator
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from fastdata._util.optional import native_disabled
from fastdata._util.stage_clock import marker
from fastdata.decode.batch import DecodedBatch, MultiDecodedBatch, empty_tensor
from fastdata.decode.shared_ring import free_in_worker
from fastdata.gpu_transforms.colour import IMAGENET_MEAN, IMAGENET_STD

try:
    from fastdata.loader import _floatbatch
except ImportError:  # not built (no C compiler at install time): torch ops instead
    _floatbatch = None  # type: ignore[assignment]  # None stands for the kernel not built: every use checks it

__all__ = ["NormalizeCollate", "collate_fields", "fast_collate"]

logger = logging.getLogger(__name__)


def fast_collate(batch: Sequence[tuple[Any, ...]], *, pad_fields: bool = False) -> tuple[Any, ...]:
    """Stack ``(image, label)`` samples into ``(uint8 [N, C, H, W], int64 [N])`` tensors.

    Each image is a ``uint8`` array or tensor in HWC layout (a 2-D grayscale image becomes
    ``C = 1``). The output is allocated once (in shared memory inside a DataLoader worker) and
    every image is written into it with a single HWC→CHW copy. A batch that
    :meth:`fastdata.ShardDataset.__getitems__` decoded in place (a :class:`~fastdata.decode.batch.DecodedBatch`)
    is returned as it is, with no copy: its images are the NHWC buffer seen as ``[N, C, H, W]``, that
    is, ``channels_last`` in memory (``images.contiguous()`` gives the other layout if a model needs it).
    Samples whose image is a list of k images (:class:`fastdata.transforms.multicrop.MultiCrop`) give a list of k
    batches, one per crop position.

    Args:
        batch: A non-empty sequence of ``(image, label)`` pairs. ``image`` is a ``np.ndarray`` or
            ``torch.Tensor`` of dtype uint8 and shape ``[H, W, C]`` or ``[H, W]`` (or a list of k of
            them); ``label`` is an int, a numpy integer or a 0-d integer tensor. Or ``(image, label, fields)``
            triples, as ``ShardDataset(..., fields=[...])`` returns them: see :func:`collate_fields`.
        pad_fields: collate variable-length fields into padded tensors with a mask (see :func:`collate_fields`).

    Returns:
        ``(images, labels)``: a uint8 tensor ``[N, C, H, W]`` (a list of k of them for multi-crop
        samples) and an int64 tensor ``[N]``; with triples, ``(images, labels, fields)``.

    Raises:
        ValueError: If the batch is empty, a sample is not a pair, an image is not uint8 or not
            2-D/3-D, or the images do not all have the same shape.
        TypeError: If an image is neither an array nor a tensor, or a label is not an integer.
    """
    mark = marker()  # per-stage CPU time for `fastdata bench --breakdown`; a no-op otherwise
    mark("collate")
    out = _collate(batch, pad_fields)
    mark("worker_loop")
    return out


def _collate(batch: Sequence[tuple[Any, ...]], pad_fields: bool) -> tuple[Any, ...]:
    if isinstance(batch, (DecodedBatch, MultiDecodedBatch)):  # decoded in place by ShardDataset.__getitems__: no copy
        return batch.nchw()
    if len(batch) == 0:
        raise ValueError("fast_collate got batch=[] (no samples); pass at least one (image, label) pair")
    if isinstance(batch[0], (tuple, list)) and len(batch[0]) == 3 and isinstance(batch[0][2], dict):
        images, labels = _collate([sample[:2] for sample in batch], False)
        return images, labels, collate_fields([sample[2] for sample in batch], pad=pad_fields)
    images = []
    labels = []
    for i, sample in enumerate(batch):
        if not isinstance(sample, (tuple, list)) or len(sample) != 2:
            raise ValueError(
                f"fast_collate expects (image, label) pairs, but batch[{i}] is {type(sample).__name__}"
                f"{'' if not isinstance(sample, (tuple, list)) else f' of length {len(sample)}'}; "
                "make the dataset return (uint8 HWC image, int label)"
            )
        images.append(sample[0])
        labels.append(_as_int(sample[1], i))
    if isinstance(images[0], (list, tuple)):  # multi-crop: k images per sample, k batches
        out: Any = [_stack([_crop(views, k, i) for i, views in enumerate(images)]) for k in range(len(images[0]))]
    else:
        out = _stack([_as_chw_view(image, i) for i, image in enumerate(images)])
    target = empty_tensor((len(labels),), torch.int64)
    target.copy_(torch.tensor(labels, dtype=torch.int64))
    return out, target


def collate_fields(samples: Sequence[dict[str, Any]], *, pad: bool = False) -> dict[str, Any]:
    """Each field of a batch's samples, collated.

    Each field of a batch's samples: numbers and same-shape arrays stacked into one tensor ``[N, ...]``;
    arrays whose first dimension varies (boxes, multi-labels) into a list of tensors, or with ``pad``
    one tensor padded with zeros along that dimension and a bool ``name + "_mask"`` tensor ``[N, L]``
    (True where a value is real); text and JSON values into a list.
    """
    out: dict[str, Any] = {}
    for name in samples[0]:
        values = [sample[name] for sample in samples]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            out[name] = torch.tensor(
                values, dtype=torch.int64 if all(isinstance(v, int) for v in values) else torch.float32
            )
        elif not all(isinstance(v, np.ndarray) for v in values):
            out[name] = values
        elif len({v.shape for v in values}) == 1:
            out[name] = torch.from_numpy(np.stack(values))
        elif not pad:
            out[name] = [torch.from_numpy(v) for v in values]
        else:
            length = max(len(v) for v in values)
            padded = np.zeros((len(values), length, *values[0].shape[1:]), dtype=values[0].dtype)
            mask = np.zeros((len(values), length), dtype=bool)
            for i, v in enumerate(values):
                padded[i, : len(v)], mask[i, : len(v)] = v, True
            out[name], out[f"{name}_mask"] = torch.from_numpy(padded), torch.from_numpy(mask)
    return out


def _stack(images: list[torch.Tensor]) -> torch.Tensor:
    _check_same_shape(images)
    out = empty_tensor((len(images), *images[0].shape), torch.uint8)
    torch.stack(images, out=out)  # the one copy: HWC views written into NCHW memory
    return out


def _crop(crops: Any, k: int, index: int) -> torch.Tensor:
    """Crop ``k`` of sample ``index``'s list of crops, as a CHW view."""
    if not isinstance(crops, (list, tuple)) or len(crops) <= k:
        raise ValueError(
            f"fast_collate got a list of crops for batch[0] but batch[{index}] has "
            f"{len(crops) if isinstance(crops, (list, tuple)) else 'no list of'} crops; "
            "make every sample return the same number of crops"
        )
    return _as_chw_view(crops[k], index)


def _as_chw_view(image: Any, index: int) -> torch.Tensor:
    """A CHW *view* (no copy) of one uint8 HWC or HW image."""
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8:
            raise ValueError(
                f"fast_collate needs uint8 images, but batch[{index}] image has dtype {image.dtype}; "
                "keep images uint8 on the CPU and convert to float on the GPU (gpu_transforms.ToFloat)"
            )
        tensor = _from_numpy(image)
    elif isinstance(image, torch.Tensor):
        if image.dtype != torch.uint8:
            raise ValueError(
                f"fast_collate needs uint8 images, but batch[{index}] image has dtype {image.dtype}; "
                "keep images uint8 on the CPU and convert to float on the GPU (gpu_transforms.ToFloat)"
            )
        tensor = image
    else:
        raise TypeError(
            f"fast_collate needs a numpy array or tensor image, but batch[{index}] image is "
            f"{type(image).__name__}; decode to a uint8 HWC numpy array"
        )
    if tensor.dim() == 2:
        tensor = tensor.unsqueeze(-1)
    if tensor.dim() != 3:
        raise ValueError(
            f"fast_collate needs HWC (3-D) or HW (2-D) images, but batch[{index}] image has shape {tuple(tensor.shape)}"
        )
    return tensor.permute(2, 0, 1)


def _from_numpy(array: np.ndarray) -> torch.Tensor:
    """Wrap an array without copying when possible (read-only arrays included)."""
    if any(s < 0 for s in array.strides):
        logger.debug("fast_collate: copying an array with negative strides %s", array.strides)
        array = np.ascontiguousarray(array)
    if not array.flags.writeable:
        # We only read from it; silence torch's "not writable" warning for this wrap.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(array)
    return torch.from_numpy(array)


def _as_int(label: Any, index: int) -> int:
    """An int from an int, numpy integer or integer 0-d tensor (floats are rejected)."""
    if isinstance(label, (bool, np.bool_)):
        raise TypeError(f"fast_collate got a bool label at batch[{index}] ({label!r}); use an int class index")
    try:
        return operator.index(label)
    except TypeError:
        raise TypeError(
            f"fast_collate needs integer labels, but batch[{index}] label is {label!r} "
            f"({type(label).__name__}); return an int class index from the dataset"
        ) from None


def _check_same_shape(images: list[torch.Tensor]) -> None:
    first = images[0].shape
    for i, img in enumerate(images):
        if img.shape != first:
            hwc = lambda s: (s[1], s[2], s[0])  # noqa: E731 - report in the HWC layout the user wrote
            raise ValueError(
                f"fast_collate needs images of one size, but batch[0] is HWC {hwc(first)} and "
                f"batch[{i}] is HWC {hwc(img.shape)}; add a crop/resize transform to the dataset "
                "(e.g. fastdata.transforms RandomResizedCrop or ResizeCenterCrop) to get equal sizes"
                + (" and convert grayscale images to RGB" if first[0] != img.shape[0] else "")
            )


class NormalizeCollate:
    """A ``collate_fn`` for CPU training: normalized float batches made in the workers.

    On a machine without CUDA, :class:`~fastdata.loader.prefetcher.DataPrefetcher` would normalize
    in the main process, on the training loop's critical path. This collate function does it in the
    DataLoader workers instead, in one pass over each batch: uint8 → float32, ``(x / 255 - mean) /
    std``, and an optional random horizontal flip per image. With fastdata's native kernels built
    (``pip install -e .`` with a C compiler) the pass is fused C with the GIL released; without them
    it falls back to torch ops. With CUDA, keep :func:`fast_collate` and normalize on the GPU.

    Args:
        mean: per-channel mean in 0..1 units (ImageNet's by default).
        std: per-channel standard deviation in 0..1 units.
        hflip_p: probability of flipping each image horizontally (torch's RNG, seeded per worker).

    Returns (when called):
        ``(images, labels)``: float32 ``[N, 3, H, W]`` (``channels_last`` in memory) and int64 ``[N]``.

    Raises:
        ValueError: a bad ``mean``/``std``/``hflip_p``, or a batch that is not 3-channel uint8.

    Example::

        loader = DataLoaderX(train, batch_size=256, num_workers=8, collate_fn=NormalizeCollate(hflip_p=0.5))
        for images, labels in loader:   # float [256, 3, 224, 224], normalized
            ...
    """

    def __init__(
        self, mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD, *, hflip_p: float = 0.0
    ) -> None:
        mean_t, std_t = tuple(float(m) for m in mean), tuple(float(s) for s in std)
        if len(mean_t) != 3 or len(std_t) != 3 or not all(s > 0 for s in std_t):
            raise ValueError(f"mean and std must be 3 numbers with std > 0, got mean={mean!r}, std={std!r}")
        if not 0.0 <= float(hflip_p) <= 1.0:
            raise ValueError(f"hflip_p must be a probability in [0, 1], got {hflip_p!r}")
        self.mean, self.std, self.hflip_p = mean_t, std_t, float(hflip_p)
        self._scale = tuple(1.0 / (255.0 * s) for s in std_t)
        self._offset = tuple(-m / s for m, s in zip(mean_t, std_t, strict=False))

    def __call__(self, batch: Sequence[tuple[Any, Any]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Collate ``(image, label)`` samples into a normalized float NCHW batch and int64 labels."""
        mark = marker()
        mark("collate")
        images, labels = _collate(batch, False)
        if images.shape[1] != 3:
            raise ValueError(f"NormalizeCollate needs RGB images, got {images.shape[1]} channels")
        nhwc = images.permute(0, 2, 3, 1).contiguous()  # no copy for a batch decoded in place
        n, height, width, _ = nhwc.shape
        out = empty_tensor((n, height, width, 3), torch.float32)
        flips = torch.rand(n) < self.hflip_p if self.hflip_p > 0 else torch.zeros(n, dtype=torch.bool)
        if _floatbatch is not None and not native_disabled():
            _floatbatch.normalize(
                nhwc.numpy(),
                out.numpy(),
                n,
                height,
                width,
                self._scale,
                self._offset,
                flips.numpy().astype(np.uint8).tobytes(),
            )
        else:
            torch.mul(nhwc, torch.tensor(self._scale), out=out).add_(torch.tensor(self._offset))
            if bool(flips.any()):
                out[flips] = out[flips].flip(2)
        free_in_worker(images)  # the uint8 batch stays in this worker: its ring segment can take the next one
        mark("worker_loop")
        return out.permute(0, 3, 1, 2), labels

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mean={self.mean}, std={self.std}, hflip_p={self.hflip_p})"
