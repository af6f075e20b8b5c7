"""Multi-crop (DINO, iBOT, SwAV): k random crops of one image from ONE region decode of the union of their boxes.

Done crop by crop, each crop decodes the image again. :class:`MultiCrop` draws every crop's box
first (each crop with its own size, scale and ratio range, drawn in order from the sample's
generator), decodes the smallest region holding all of them once, at the finest DCT scale any
crop needs, and resizes each crop out of it. Where every crop would choose the same DCT scale on
its own (the usual case for ImageNet-sized photos), each output equals, pixel for pixel, what its
:class:`~fastdata.transforms.RandomResizedCrop` gives alone with the same draw; a crop that alone
would decode at a coarser scale is cut from the finer decode instead (more detail, not the same
bytes). ``one_decode=False`` decodes once per distinct scale instead (at most four), so that every
crop is always the one its ``RandomResizedCrop`` gives.

The sample is ``([crop_0, ..., crop_k-1], label)``. A :class:`~fastdata.ShardDataset` batch is decoded in
place into k uint8 batch tensors (:meth:`MultiCrop.decode_batch`, in shared memory inside a worker);
:func:`fastdata.fast_collate` hands them on as a list of k batches (it stacks lists of crops from any other
dataset), and :class:`fastdata.DataPrefetcher` carries the list to the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from fastdata.decode import native
from fastdata.decode.base import Decoder
from fastdata.decode.batch import MultiDecodedBatch, empty_tensor
from fastdata.decode.headers import is_jpeg
from fastdata.decode.scaling import Box, choose_scale, headroom, region_box, resize_into, scaled_box, scaled_size
from fastdata.sampler.seeding import sample_generator
from fastdata.transforms.base import DecodeTransform
from fastdata.transforms.crop import RandomResizedCrop

__all__ = ["MultiCrop", "decode_region"]

Scale = tuple[int, int]


def decode_region(decoder: Decoder, data: bytes, scale: Scale, region: tuple[int, int, int, int]) -> np.ndarray:
    """Rows ``y0:y1``, columns ``x0:x1`` of the image decoded at DCT ``scale`` (a region decode where possible).

    fastdata's native kernel decodes only the region (the same pixels as a whole decode at that scale);
    other decoders decode the whole image at that scale and the region is a view of it.
    """
    y0, y1, x0, x1 = region
    if isinstance(decoder, native.NativeJpegDecoder) and native.available() and is_jpeg(data):
        out = np.empty((y1 - y0, x1 - x0, 3), np.uint8)
        try:
            native._region(data, scale, y0, y1, x0, x1, out, True)
            return out
        except native.RecoveredDamage:  # a damaged file: the decoder's own fallback, as decode_crop_into does
            pass
    return decoder.decode(data, scale=scale)[y0:y1, x0:x1]


def _union(boxes: Sequence[Box]) -> Box:
    top, left = min(b[0] for b in boxes), min(b[1] for b in boxes)
    bottom, right = max(b[0] + b[2] for b in boxes), max(b[1] + b[3] for b in boxes)
    return top, left, bottom - top, right - left


class MultiCrop(DecodeTransform):
    """k ``RandomResizedCrop`` crops of one image, decoded once (see the module docstring).

    Args:
        crops: the crops, in output order; each a :class:`~fastdata.transforms.RandomResizedCrop` (its size,
            scale, ratio and resample are used; its decoder is not). DINO's: 2 global + 6 local.
        one_decode: True: one region decode at the finest scale any crop needs; False: one per distinct scale,
            every crop then exactly its ``RandomResizedCrop``'s output.
        decoder: a Decoder or decoder name (see :class:`~fastdata.transforms.DecodeTransform`).

    Raises:
        ValueError: no crop.
        TypeError: a crop is not a ``RandomResizedCrop``.

    Example::

        transform = MultiCrop([RandomResizedCrop(224, scale=(0.4, 1.0))] * 2
                              + [RandomResizedCrop(96, scale=(0.05, 0.4))] * 6)
        dataset = ShardDataset("shards/train", transform=transform)
        loader = DataLoaderX(dataset, batch_size=64, num_workers=8, collate_fn=fast_collate)
        for crops, labels in DataPrefetcher(loader):   # crops: a list of 8 float batches on the GPU
            ...
    """

    uses_rng = True

    def __init__(
        self, crops: Sequence[RandomResizedCrop], *, one_decode: bool = True, decoder: Decoder | str = "auto"
    ) -> None:
        super().__init__(decoder=decoder)
        crops = list(crops)
        if not crops:
            raise ValueError("MultiCrop needs at least one crop; pass [RandomResizedCrop(224), ...]")
        for k, crop in enumerate(crops):
            if not isinstance(crop, RandomResizedCrop):
                raise TypeError(f"crop {k} must be a RandomResizedCrop (size, scale, ratio), got {type(crop).__name__}")
        self.crops = crops
        self.one_decode = bool(one_decode)

    @property
    def sizes(self) -> list[tuple[int, int]]:
        """The ``(height, width)`` of each crop, in output order."""
        return [c.size for c in self.crops]

    def draw(self, height: int, width: int, rng: np.random.Generator | None = None) -> list[Box]:
        """Each crop's ``(top, left, h, w)`` for an image of this size, drawn in order (as each crop alone draws)."""
        return [c._params(height, width, rng) for c in self.crops]

    def __call__(  # type: ignore[override]  # k images, not one: decode_into refuses, decode_into_all replaces it
        self, data: bytes, *, rng: np.random.Generator | None = None
    ) -> list[np.ndarray]:
        """The k crops of one encoded image (RGB uint8, each of its crop's size).

        Raises:
            fastdata.decode.DecodeError: the image cannot be decoded.
        """
        outs = [np.empty((*c.size, 3), np.uint8) for c in self.crops]
        self.decode_into_all(data, outs, rng=rng)
        return outs

    def decode_into(self, data: bytes, out: np.ndarray, *, rng: np.random.Generator | None = None) -> None:
        """Not available: a multi-crop has k outputs; use :meth:`decode_into_all`.

        Raises:
            TypeError: always.
        """
        raise TypeError("MultiCrop makes k images per sample; call decode_into_all(data, [out_0, ..., out_k-1])")

    def decode_into_all(
        self, data: bytes, outs: Sequence[np.ndarray], *, rng: np.random.Generator | None = None
    ) -> None:
        """Decode the k crops of one image into ``outs`` (one writable uint8 ``(h, w, 3)`` array per crop).

        Raises:
            ValueError: ``outs`` does not hold one array of each crop's size.
            fastdata.decode.DecodeError: the image cannot be decoded.
        """
        if [o.shape for o in outs] != [(*c.size, 3) for c in self.crops]:
            raise ValueError(
                f"outs must be arrays of shapes {[(*c.size, 3) for c in self.crops]}, got {[o.shape for o in outs]}"
            )
        decoder = self.resolve_decoder()
        full = decoder.read_size(data)
        if full is None:  # no cheap header: decode fully once, crop in full resolution
            image = decoder.decode(data)
            height, width = image.shape[:2]
            for crop, box, out in zip(self.crops, self.draw(height, width, rng), outs, strict=True):
                top, left, h, w = box
                resize_into(image[top : top + h, left : left + w], out, crop.resample)
            return
        boxes = self.draw(full[0], full[1], rng)
        scales = [
            choose_scale(decoder.scales, b[2], b[3], c.size[0] * headroom(c.resample), c.size[1] * headroom(c.resample))
            for b, c in zip(boxes, self.crops, strict=True)
        ]
        if self.one_decode:
            finest = max(scales, key=lambda s: s[0] / s[1])
            scales = [finest] * len(scales)
        for scale in dict.fromkeys(scales):  # one decode per distinct scale, in first-use order
            members = [k for k, s in enumerate(scales) if s == scale]
            shape = scaled_size(full[0], full[1], scale)
            y0, y1, x0, x1 = scaled_box(_union([boxes[k] for k in members]), scale, shape)
            region = decode_region(decoder, data, scale, (y0, y1, x0, x1))
            for k in members:
                a0, a1, b0, b1 = scaled_box(boxes[k], scale, shape)
                part = region[a0 - y0 : a1 - y0, b0 - x0 : b1 - x0]
                resize_into(part, outs[k], self.crops[k].resample, region_box(boxes[k], scale, a0, b0))

    def decode_batch(self, dataset: Any, indices: Sequence[int]) -> MultiDecodedBatch:
        """A batch of ``dataset`` (with ``read()``) decoded in place into k uint8 ``[N, h, w, 3]`` tensors.

        :meth:`fastdata.ShardDataset.__getitems__` calls it; the tensors are in shared memory inside a worker
        and :func:`fastdata.fast_collate` hands them on without a copy.
        """
        images = [empty_tensor((len(indices), *c.size, 3), torch.uint8) for c in self.crops]
        labels = empty_tensor((len(indices),), torch.int64)
        arrays, label_view = [i.numpy() for i in images], labels.numpy()
        for slot, index in enumerate(indices):
            data, label_view[slot] = dataset.read(index)
            self.decode_into_all(data, [a[slot] for a in arrays], rng=sample_generator(index))
        return MultiDecodedBatch(images, labels)

    def _extra_repr(self) -> str:
        return f"crops={self.crops!r}, one_decode={self.one_decode}"
