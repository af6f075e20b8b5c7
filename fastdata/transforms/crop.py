"""The crop transforms at decode time: ``RandomResizedCrop`` and ``ResizeCenterCrop``.

Each chooses its crop from the header's size and decodes it at the smallest DCT scale that
still covers the pixels it needs. That pays off for large photos and small outputs (a 128-pixel
crop, low-resolution progressive training); a 224-pixel crop of a 500x375 photo rarely allows a
reduced scale, since a half-size decode needs a crop of at least 448 pixels. Both write straight
into a batch slot (``decode_into``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
from typing_extensions import override

from fastdata.decode import Decoder
from fastdata.decode.scaling import resample_mode, resize_into
from fastdata.transforms.base import DecodeTransform, _pair, _range
from fastdata.transforms.crop_params import sample_crop

logger = logging.getLogger(__name__)

__all__ = ["RandomResizedCrop", "ResizeCenterCrop"]


class RandomResizedCrop(DecodeTransform):
    """torchvision's ``RandomResizedCrop`` fused with a DCT-scaled decode.

    The crop is sampled in full-resolution coordinates from the header size with
    torchvision's algorithm. Called with ``rng`` (a ``numpy.random.Generator``), it draws from
    that generator: :class:`~fastdata.datasets.shard_dataset.ShardDataset` passes the sample's own generator
    when :class:`~fastdata.DataLoaderX` keys the indices (:mod:`fastdata.sampler.seeding`), so a run
    gives the same crops whatever ``num_workers`` is and a resumed run the crops of an
    uninterrupted one. Without ``rng`` (``ds[i]`` with a plain int, torch's DataLoader) it draws
    from torch's global RNG exactly as torchvision does (DataLoader's per-worker seeding applies).
    The JPEG is then decoded at the smallest DCT scale that keeps the crop at least ``size`` (by default
    :data:`~fastdata.decode.scaling.ANTIALIAS_HEADROOM` times it), the crop box is mapped into the scaled image
    (grown outwards to whole pixels, at most one scaled pixel per side) and resized by ``resample``. The default
    gives torchvision's pictures: its ``RandomResizedCrop`` on the PIL image (PIL's antialiased bilinear), exactly
    where the crop is decoded at full scale (a 224 crop of an ImageNet-sized photo). PyTurboJPEG 1.x cannot decode
    only a region, so that decoder decodes the whole image at that scale.

    Args:
        size: output size, an int (square) or ``(height, width)``.
        scale: range of the crop's area as a fraction of the image's.
        ratio: range of the crop's aspect ratio (width / height), sampled log-uniformly.
        resample: how the crop is resized (:mod:`fastdata.decode.scaling` says what each gives): None or
            ``"antialias"`` (default): PIL's antialiased bilinear, torchvision's and timm's pictures. ``"fast"``:
            0.2.0's resample, the smallest DCT scale, then OpenCV's ``INTER_LINEAR`` (``INTER_AREA`` where 2x or
            more shrink remains): cheaper, sharper than the reference (aliased). ``"area"``, ``"linear"``: always
            ``INTER_AREA`` when shrinking / always ``INTER_LINEAR``.
        antialias: 0.2.0's switch, instead of ``resample``: True is ``"area"``, False ``"linear"``.
        decoder: a Decoder or decoder name (see :class:`DecodeTransform`).

    Raises:
        ValueError: a bad ``size``, ``scale``, ``ratio``, ``resample`` or decoder name.

    Example::

        transform = RandomResizedCrop(224)
        dataset = ShardDataset("shards/train", transform=transform)
    """

    uses_rng = True

    def __init__(
        self,
        size: int | Sequence[int],
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
        *,
        resample: str | None = None,
        antialias: bool | None = None,
        decoder: Decoder | str = "auto",
    ) -> None:
        super().__init__(decoder=decoder)
        self.resample = resample_mode(resample, None if antialias is None else bool(antialias))
        self.size = _pair(size, "size")
        self.scale = _range(scale, "scale")
        self.ratio = _range(ratio, "ratio")

    @staticmethod
    def get_params(
        height: int,
        width: int,
        scale: Sequence[float],
        ratio: Sequence[float],
        *,
        rng: np.random.Generator | None = None,
    ) -> tuple[int, int, int, int]:
        """Sample a crop ``(top, left, h, w)`` the way torchvision does.

        Ten tries of a uniform area fraction in ``scale`` and a log-uniform aspect ratio
        in ``ratio``; if none fits, a central crop with the aspect ratio clamped to
        ``ratio``.

        Args:
            height: image height.
            width: image width.
            scale: ``(min, max)`` area fraction.
            ratio: ``(min, max)`` aspect ratio (width / height).
            rng: draw from this generator; None: from torch's global RNG, call for call as
                torchvision does (see ``sample_crop`` in :mod:`fastdata.transforms.crop_params`).

        Returns:
            ``(top, left, h, w)`` inside the image, ``h, w >= 1``.

        Raises:
            ValueError: ``height`` or ``width`` is not positive.
        """
        if height <= 0 or width <= 0:
            raise ValueError(f"height and width must be positive, got {height}x{width}")
        return sample_crop(height, width, scale, ratio, rng=rng)

    @property
    def output_size(self) -> tuple[int, int]:  # type: ignore[override]  # noqa: D102
        return self.size

    def __call__(self, data: bytes, *, rng: np.random.Generator | None = None) -> np.ndarray:
        """Crop, decode and resize one encoded image.

        Args:
            data: the encoded image bytes.
            rng: the generator to draw the crop from (see :meth:`get_params`); None: torch's RNG.

        Returns:
            RGB ``uint8`` array of shape ``size + (3,)``.

        Raises:
            fastdata.decode.DecodeError: the image cannot be decoded.
        """
        out = np.empty((*self.size, 3), np.uint8)
        self.decode_into(data, out, rng=rng)
        return out

    @override
    def decode_into(
        self,
        data: bytes,
        out: np.ndarray,
        *,  # noqa: D102 (documented on DecodeTransform)
        rng: np.random.Generator | None = None,
    ) -> None:
        decoder = self.resolve_decoder()
        full = decoder.read_size(data)
        if full is None:  # no cheap header: decode fully, crop in full resolution
            image = decoder.decode(data)
            top, left, height, width = self._params(image.shape[0], image.shape[1], rng)
            resize_into(image[top : top + height, left : left + width], out, self.resample)
            return
        box = self._params(full[0], full[1], rng)
        decoder.decode_crop_into(data, box, out, resample=self.resample)

    def _params(self, height: int, width: int, rng: np.random.Generator | None) -> tuple[int, int, int, int]:
        if rng is None:  # the call torchvision makes (a subclass overriding get_params without rng keeps working)
            return self.get_params(height, width, self.scale, self.ratio)
        return self.get_params(height, width, self.scale, self.ratio, rng=rng)

    def _extra_repr(self) -> str:
        ratio = tuple(round(r, 4) for r in self.ratio)
        return f"size={self.size}, scale={self.scale}, ratio={ratio}, resample={self.resample!r}"


class ResizeCenterCrop(DecodeTransform):
    """``Resize(resize)`` then ``CenterCrop(size)`` (torchvision semantics) with a DCT-scaled decode.

    The JPEG is decoded at the smallest DCT scale that keeps the resized size reachable without enlarging (by
    default :data:`~fastdata.decode.scaling.ANTIALIAS_HEADROOM` times it), then resized by ``resample`` and
    center-cropped. The evaluation transform of ImageNet-style training; by default torchvision's pictures
    (``Resize`` + ``CenterCrop`` on the PIL image).

    Args:
        resize: an int resizes the shorter side to it, keeping the aspect ratio
            (the longer side is truncated to an int, as torchvision does); a
            ``(height, width)`` resizes to exactly that.
        size: center crop size, an int (square) or ``(height, width)``; must fit
            inside the resized image.
        resample: as :class:`RandomResizedCrop`'s; None: ``"antialias"`` (PIL's antialiased bilinear).
        antialias: 0.2.0's switch, instead of ``resample``: True (0.2.0's default) is ``"area"`` (OpenCV's
            ``INTER_AREA``), False ``"linear"``.
        decoder: a Decoder or decoder name (see :class:`DecodeTransform`).

    Raises:
        ValueError: a bad ``resize``/``size``, a crop larger than ``resize``, a bad ``resample`` or a bad
            decoder name.

    Example::

        val_dataset = ShardDataset("shards/val", transform=ResizeCenterCrop(256, 224))
    """

    def __init__(
        self,
        resize: int | Sequence[int] = 256,
        size: int | Sequence[int] = 224,
        *,
        resample: str | None = None,
        antialias: bool | None = None,
        decoder: Decoder | str = "auto",
    ) -> None:
        super().__init__(decoder=decoder)
        self.resample = resample_mode(resample, None if antialias is None else bool(antialias))
        _pair(resize, "resize")  # validates
        self.resize = resize if isinstance(resize, int) else tuple(resize)
        self.size = _pair(size, "size")
        smallest = (resize, resize) if isinstance(resize, int) else _pair(resize, "resize")
        if self.size[0] > smallest[0] or self.size[1] > smallest[1]:
            raise ValueError(f"size {self.size} must fit inside resize {resize!r}; make size <= resize")

    def resized_size(self, height: int, width: int) -> tuple[int, int]:
        """The ``(height, width)`` after the resize step for an image of this size.

        Raises:
            ValueError: ``height`` or ``width`` is not positive.
        """
        if height <= 0 or width <= 0:
            raise ValueError(f"height and width must be positive, got {height}x{width}")
        if not isinstance(self.resize, int):
            return _pair(self.resize, "resize")
        if height <= width:
            return self.resize, int(self.resize * width / height)
        return int(self.resize * height / width), self.resize

    @property
    def output_size(self) -> tuple[int, int]:  # type: ignore[override]  # noqa: D102
        return self.size

    def __call__(self, data: bytes) -> np.ndarray:  # noqa: D102
        out = np.empty((*self.size, 3), np.uint8)
        self.decode_into(data, out)
        return out

    @override
    def decode_into(
        self,
        data: bytes,
        out: np.ndarray,
        *,  # noqa: D102 (documented on DecodeTransform)
        rng: np.random.Generator | None = None,
    ) -> None:
        decoder = self.resolve_decoder()
        full = decoder.read_size(data)
        if full is None:
            full = decoder.decode(data).shape[:2]  # no cheap header (rare formats): learn the size first
        resized = np.empty((*self.resized_size(*full), 3), np.uint8)
        decoder.decode_crop_into(data, None, resized, resample=self.resample)
        crop_h, crop_w = self.size
        top = int(round((resized.shape[0] - crop_h) / 2.0))
        left = int(round((resized.shape[1] - crop_w) / 2.0))
        np.copyto(out, resized[top : top + crop_h, left : left + crop_w])

    def _extra_repr(self) -> str:
        return f"resize={self.resize}, size={self.size}, resample={self.resample!r}"
