"""A decode-time crop and the augmentations after it as ONE decode-time transform: ``DecodeCompose``.

``DecodeCompose([RandomResizedCrop(224), RandomHorizontalFlip(), RandAugment.from_config("rand-m9-mstd0.5-inc1"),
RandomErasing(0.25)])`` decodes the crop into the batch slot (a :class:`~fastdata.transforms.DecodeTransform` with a
fixed ``output_size``), then applies each :class:`ImageAugment` to the uint8 ``(H, W, 3)`` slot in place, all in the
DataLoader worker. The crop and every augmentation draw, in that order, from the sample's own generator
(:func:`fastdata.sampler.seeding.sample_generator`), so the pixels do not depend on ``num_workers`` and a resumed
run gives those of an uninterrupted one. :meth:`fastdata.ShardDataset.__getitems__` still decodes the batch in place;
with a ``RandomResizedCrop`` on the native decoder the crops of a batch are decoded in one kernel call and the
augmentations then run slot by slot (:func:`fastdata.datasets.batch_decode.decode_all_into`).

Without a sample generator (``ds[i]`` with a plain int, torch's own DataLoader) the crop draws from torch's RNG as
torchvision does, and the augmentations from a numpy generator seeded by one draw of torch's RNG (DataLoader's
per-worker seeding applies).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from typing_extensions import override

from fastdata.decode import Decoder
from fastdata.transforms.base import DecodeTransform

__all__ = ["DecodeCompose", "ImageAugment", "torch_generator"]


def torch_generator() -> np.random.Generator:
    """A numpy generator seeded by one draw of torch's global RNG (for callers that pass no generator)."""
    return np.random.Generator(np.random.Philox(key=int(torch.randint(0, 2**63 - 1, (1,)).item())))


def check_image(image: Any) -> np.ndarray:
    """``image`` as a C-contiguous uint8 ``(H, W, 3)`` array (TypeError/ValueError naming what it got)."""
    if not isinstance(image, np.ndarray):
        raise TypeError(f"image must be a numpy uint8 array (H, W, 3), got {type(image).__name__}")
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"image must be uint8 (H, W, 3) RGB, got {image.dtype} {image.shape}")
    return np.ascontiguousarray(image)


class ImageAugment(abc.ABC):
    """A random augmentation of a decoded RGB uint8 ``(H, W, 3)`` image that keeps its size.

    Subclasses implement :meth:`apply`. Called directly (``augment(image)``, e.g. as ``ShardDataset(transform=...)``
    after a full decode) it works on a copy; inside a :class:`DecodeCompose` it works on the batch slot.

    Attributes:
        uses_rng: always True: :meth:`apply` draws from the generator it is given.
    """

    uses_rng = True

    @abc.abstractmethod
    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Augment ``image``, drawing from ``rng``.

        Args:
            image: C-contiguous uint8 ``(H, W, 3)``; may be modified in place.
            rng: the sample's generator.

        Returns:
            The augmented image: ``image`` itself, or a new array of its shape.
        """

    def __call__(self, image: np.ndarray, *, rng: np.random.Generator | None = None) -> np.ndarray:
        """The augmented copy of ``image`` (uint8 ``(H, W, 3)``); ``rng`` None: seeded from torch's RNG.

        Raises:
            TypeError: ``image`` is not a numpy array.
            ValueError: ``image`` is not uint8 ``(H, W, 3)``.
        """
        work = check_image(image).copy()
        return self.apply(work, torch_generator() if rng is None else rng)

    def _extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._extra_repr()})"


class DecodeCompose(DecodeTransform):
    """A fixed-size decode-time transform followed by :class:`ImageAugment` s, as one decode-time transform.

    Args:
        transforms: first a :class:`~fastdata.transforms.DecodeTransform` with a fixed ``output_size``
            (``RandomResizedCrop``, ``ResizeCenterCrop``), then any number of :class:`ImageAugment` s, applied in
            order. A ``DecodeCompose`` as the first item is unrolled.

    Raises:
        ValueError: no transform, or a first transform without a fixed output size.
        TypeError: the first is not a decode-time transform, or a later one is not an ``ImageAugment``.

    Example::

        transform = DecodeCompose([RandomResizedCrop(224), RandomHorizontalFlip(),
                                   RandAugment.from_config("rand-m9-mstd0.5-inc1"), RandomErasing(0.25)])
        dataset = ShardDataset("shards/train", transform=transform)
        image, label = dataset[0]   # uint8 (224, 224, 3)
    """

    uses_rng = True
    transforms: list[Any]  # the crop (a DecodeTransform), then the ImageAugments

    def __init__(self, transforms: Sequence[Any]) -> None:
        items = list(transforms)
        if not items:
            raise ValueError("DecodeCompose needs a crop first, e.g. DecodeCompose([RandomResizedCrop(224), ...])")
        if isinstance(items[0], DecodeCompose):
            items = list(items[0].transforms) + items[1:]
        crop = items[0]
        if not isinstance(crop, DecodeTransform):
            raise TypeError(
                f"the first transform must be a decode-time transform (RandomResizedCrop, "
                f"ResizeCenterCrop), got {type(crop).__name__}"
            )
        if getattr(crop, "output_size", None) is None or callable(getattr(crop, "decode_batch", None)):
            raise ValueError(
                f"the first transform must have one fixed output size (RandomResizedCrop, "
                f"ResizeCenterCrop), got {crop!r}"
            )
        for k, item in enumerate(items[1:], start=1):
            if not isinstance(item, ImageAugment):
                raise TypeError(
                    f"transform {k} must be a decode-time augmentation (RandAugment, RandomErasing, ...; "
                    f"an ImageAugment), got {type(item).__name__}"
                )
        super().__init__(decoder=crop.decoder)
        self.transforms = items

    @property
    def crop(self) -> DecodeTransform:
        """The decode-time transform that makes the image (the first one)."""
        return self.transforms[0]

    @property
    def augments(self) -> list[ImageAugment]:
        """The augmentations applied after it, in order."""
        return self.transforms[1:]

    @property
    def output_size(self) -> tuple[int, int]:  # type: ignore[override]  # noqa: D102
        size = self.crop.output_size
        assert size is not None, "DecodeCompose's crop has a fixed output size (checked when it was made)"
        return size

    def resolve_decoder(self) -> Decoder:  # noqa: D102 (documented on DecodeTransform)
        return self.crop.resolve_decoder()

    def __call__(self, data: bytes, *, rng: np.random.Generator | None = None) -> np.ndarray:
        """Decode, crop and augment one encoded image.

        Args:
            data: the encoded image bytes.
            rng: the sample's generator (None: torch's RNG, see the module docstring).

        Returns:
            RGB ``uint8`` array of shape ``output_size + (3,)``.

        Raises:
            fastdata.decode.DecodeError: the image cannot be decoded.
        """
        out = np.empty((*self.output_size, 3), np.uint8)
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
        self.crop.decode_into(data, out, rng=rng)
        self.augment_into(out, rng)

    def augment_into(self, out: np.ndarray, rng: np.random.Generator | None) -> None:
        """Apply the augmentations to the decoded crop in ``out`` (one batch slot), in place.

        Args:
            out: the decoded crop, C-contiguous uint8 ``(H, W, 3)``.
            rng: the generator the crop drew from (None: one seeded from torch's RNG).
        """
        if not self.augments:
            return
        rng = torch_generator() if rng is None else rng
        image = out
        for augment in self.augments:
            image = augment.apply(image, rng)
        if image is not out:
            np.copyto(out, image)

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()  # the crop keeps (or drops) its own resolved decoder

    def __repr__(self) -> str:
        inner = ",\n    ".join(repr(t) for t in self.transforms)
        return f"{type(self).__name__}([\n    {inner}])"
