"""The decode-time transform interface: encoded bytes in, RGB ``uint8`` ``(H, W, 3)`` out.

They run in DataLoader workers. Because they see the encoded image, they can decode a
JPEG at the smallest DCT scale that still covers the pixels they need.
:class:`fastdata.datasets.ShardDataset` calls instances of :class:`DecodeTransform`
with the encoded bytes and any other transform (e.g. torchvision's) with the array
decoded by :class:`Decode`.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence
from typing import Any, Protocol, cast

import numpy as np

from fastdata.decode import DECODER_NAMES, Decoder, get_decoder

__all__ = ["Decode", "DecodeTransform", "RandomDecode"]


def _pair(value: int | Sequence[int], name: str) -> tuple[int, int]:
    """``int`` or ``(h, w)`` (or ``(s,)``) to a ``(h, w)`` of positive ints, like torchvision."""
    if isinstance(value, int) and not isinstance(value, bool):
        pair: tuple[Any, ...] = (value, value)
    elif isinstance(value, Sequence) and len(value) in (1, 2):
        pair = (value[0], value[0]) if len(value) == 1 else tuple(value)
    else:
        raise ValueError(f"{name} must be an int or a (height, width) pair, got {value!r}")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in pair):
        raise ValueError(f"{name} must hold positive ints, got {value!r}")
    return pair[0], pair[1]


def _range(value: Sequence[float], name: str) -> tuple[float, float]:
    """A ``(min, max)`` pair of positive numbers with ``min <= max``."""
    if not isinstance(value, Sequence) or len(value) != 2:
        raise ValueError(f"{name} must be a (min, max) pair, got {value!r}")
    low, high = float(value[0]), float(value[1])
    if not (0 < low <= high and math.isfinite(high)):
        raise ValueError(f"{name} must satisfy 0 < min <= max, got {value!r}; pass (min, max)")
    return low, high


class RandomDecode(Protocol):
    """The call of a transform with ``uses_rng``: it takes the sample's generator as keyword ``rng``."""

    def __call__(self, data: bytes, *, rng: np.random.Generator | None) -> np.ndarray:
        """Decode (and transform) ``data``, drawing from ``rng`` (None: the global RNG)."""
        ...


class DecodeTransform(abc.ABC):
    """A transform that receives the ENCODED image and returns RGB ``uint8`` ``(H, W, 3)``.

    Args:
        decoder: a :class:`~fastdata.decode.Decoder` or a name for
            :func:`~fastdata.decode.get_decoder`; a name is resolved lazily, once per
            process, so the transform pickles small and spawned workers pick their own.

    Raises:
        ValueError: an unknown decoder name.
        TypeError: ``decoder`` is neither a name nor a Decoder.

    Attributes:
        uses_rng: True for a random transform whose ``__call__`` takes a keyword ``rng`` (a
            ``numpy.random.Generator``). :class:`~fastdata.datasets.shard_dataset.ShardDataset` then passes the
            sample's own generator (:func:`fastdata.sampler.seeding.sample_generator`) whenever the index
            carries one, which makes the pixels independent of ``num_workers`` and exact under
            resume. False (the default): ``__call__(data)`` only.

    Example::

        class Thumbnail(DecodeTransform):
            def __call__(self, data: bytes) -> np.ndarray:
                return self.resolve_decoder().decode(data, scale=(1, 8))
    """

    uses_rng: bool = False

    def __init__(self, *, decoder: Decoder | str = "auto") -> None:
        if isinstance(decoder, str):
            if decoder not in DECODER_NAMES:
                raise ValueError(f"decoder must be one of {DECODER_NAMES} or a Decoder, got {decoder!r}")
        elif not isinstance(decoder, Decoder):
            raise TypeError(f"decoder must be a Decoder or one of {DECODER_NAMES}, got {type(decoder).__name__}")
        self.decoder = decoder
        self._resolved: Decoder | None = None if isinstance(decoder, str) else decoder

    def resolve_decoder(self) -> Decoder:
        """The decoder, resolving a name on first use in this process."""
        if self._resolved is None:
            self._resolved = get_decoder(self.decoder)  # type: ignore[arg-type]
        return self._resolved

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if isinstance(self.decoder, str):
            state["_resolved"] = None  # re-resolve in the receiving process
        return state

    #: ``(height, width)`` of every output, or None when it depends on the image. Transforms with a
    #: fixed size are decoded straight into a batch by :meth:`fastdata.ShardDataset.__getitems__`.
    output_size: tuple[int, int] | None = None

    def decode_into(self, data: bytes, out: np.ndarray, *, rng: np.random.Generator | None = None) -> None:
        """Decode (and transform) one encoded image into ``out``, one slot of a batch.

        The default calls the transform and copies; fixed-size transforms write in place.

        Args:
            data: the encoded image bytes.
            out: writable C-contiguous uint8 array of shape ``(*output_size, 3)``.
            rng: the sample's generator, for transforms with ``uses_rng`` (None: torch's RNG).

        Raises:
            fastdata.decode.DecodeError: the image cannot be decoded.
            ValueError: ``out`` has another shape than the transform's output.
        """
        # uses_rng: __call__ takes rng (the class contract)
        image = cast(RandomDecode, self)(data, rng=rng) if self.uses_rng and rng is not None else self(data)
        if image.shape != out.shape:
            raise ValueError(
                f"{type(self).__name__} made an image of shape {image.shape}, the batch slot is "
                f"{out.shape}; use a transform with a fixed output size"
            )
        np.copyto(out, image)

    @abc.abstractmethod
    def __call__(self, data: bytes) -> np.ndarray:
        """Decode (and transform) one encoded image.

        Args:
            data: the encoded image bytes.

        Returns:
            RGB ``uint8`` array ``(H, W, 3)``.

        Raises:
            fastdata.decode.DecodeError: the image cannot be decoded.
        """

    def _extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        extra = self._extra_repr()
        return f"{type(self).__name__}({extra}{', ' if extra else ''}decoder={self.decoder!r})"


class Decode(DecodeTransform):
    """Full-size decode; what :class:`~fastdata.datasets.shard_dataset.ShardDataset` uses by default.

    Example::

        image = Decode()(jpeg_bytes)  # uint8 (H, W, 3), RGB
    """

    def __call__(self, data: bytes) -> np.ndarray:  # noqa: D102 (documented on DecodeTransform)
        return self.resolve_decoder().decode(data)
