"""The decoder interface: :class:`Decoder`, :class:`DecodeError`, :class:`DecodeWarning` and the decoder names.

DCT scales and the resize helpers are in :mod:`fastdata.decode.scaling`, header parsing in
:mod:`fastdata.decode.headers`.

Every decoder returns RGB ``uint8`` arrays of shape ``(H, W, 3)``, C-contiguous, the
way ``PIL.Image.open(f).convert("RGB")`` would (grayscale, CMYK, palette and RGBA
images included; EXIF orientation is never applied). A JPEG can be decoded at a
reduced size through libjpeg's DCT scaling: with ``scale=(1, 4)`` the IDCT emits
2x2 pixels per 8x8 block, so the output is ``ceil(h / 4) x ceil(w / 4)`` and the
IDCT, upsampling and colour conversion shrink with it (entropy decoding does not).

Decoders hold no library handles, so they pickle in a few bytes and can be sent to
spawned DataLoader workers; the libturbojpeg handle is fetched per process through
:func:`fastdata._util.optional.turbojpeg_handle`.

Every failure, whatever the input, is a :class:`DecodeError` naming the reason; damage a
codec works around (libjpeg's "extraneous bytes before marker") is a :class:`DecodeWarning`
from :meth:`Decoder.validate`, and the image is accepted, as PIL accepts it.
"""

from __future__ import annotations

import abc

import numpy as np

from fastdata.decode.headers import _PNG_SIGNATURE, is_jpeg, jpeg_header, png_size
from fastdata.decode.scaling import (
    KERNEL_SCALES,
    Box,
    Scale,
    check_out,
    choose_scale,
    headroom,
    region_box,
    resample_mode,
    resize_into,
    scaled_box,
)

__all__ = ["DECODER_NAMES", "DecodeError", "DecodeWarning", "Decoder", "check_not_empty"]

#: Names accepted by :func:`get_decoder`.
DECODER_NAMES: tuple[str, ...] = ("auto", "native", "turbojpeg", "opencv")


class DecodeError(ValueError):
    """An image could not be decoded; the message says why."""


class DecodeWarning(UserWarning):
    """An image decoded, but its codec reported damage it worked around (the message says which).

    PIL decodes such files (libjpeg's "Corrupt JPEG data: 3 extraneous bytes before marker
    0xc0", say) and so does fastdata; ``fastdata pack`` records the messages per file in the
    manifest instead of printing them.
    """


def check_not_empty(data: bytes) -> None:
    """Raise TypeError for non-bytes input and DecodeError for empty input."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes-like, got {type(data).__name__}")
    if len(data) == 0:
        raise DecodeError("empty file")


class Decoder(abc.ABC):
    """Decodes encoded image bytes to RGB ``uint8`` ``(H, W, 3)`` arrays.

    Attributes:
        name: the name :func:`get_decoder` knows this decoder by.
        scales: the DCT scale factors ``(num, den)`` applied to JPEGs, ascending,
            always ending with ``(1, 1)``.

    Example::

        decoder = get_decoder("auto")
        height, width = decoder.read_size(data)
        scale = choose_scale(decoder.scales, height, width, 224, 224)
        image = decoder.decode(data, scale=scale)  # at least 224 x 224
    """

    name: str = ""
    scales: tuple[Scale, ...] = ((1, 1),)

    def read_size(self, data: bytes) -> tuple[int, int] | None:
        """``(height, width)`` from the header without decoding pixels.

        Args:
            data: the encoded image.

        Returns:
            The full size for JPEG and PNG; None for other formats or an unreadable
            (or zero-sized) header: decode the image to learn its size then.
        """
        if is_jpeg(data):
            return jpeg_header(data)[0]
        if bytes(data[:8]) == _PNG_SIGNATURE:
            return png_size(data)
        return None

    @abc.abstractmethod
    def decode(self, data: bytes, *, scale: Scale = (1, 1)) -> np.ndarray:
        """Decode to RGB ``uint8`` ``(H, W, 3)``, C-contiguous.

        Args:
            data: the encoded image: JPEG, PNG, GIF, BMP, TIFF, WebP or PPM/PGM/PBM.
            scale: one of :attr:`scales`; the output is ``scaled_size(h, w, scale)``.
                JPEGs are DCT-scaled; other formats are decoded fully and resized
                with ``INTER_AREA``.

        Returns:
            The image, as ``PIL.Image.open(f).convert("RGB")`` gives it (the default
            image of an animation; 16-bit and float input clipped as PIL clips it; EXIF
            orientation is not applied).

        Raises:
            DecodeError: the data is empty, not an image, damaged beyond decoding, or
                declares more pixels than the limit (:func:`~fastdata.decode.set_max_pixels`;
                checked from the header, before anything is allocated). Nothing else
                escapes for bad data. Damage libjpeg-turbo recovers from (a few corrupt
                bytes, a missing end marker) decodes with a Python ``UserWarning``;
                :meth:`validate` applies PIL's rules.
            ValueError: ``scale`` is not one of :attr:`scales`.
        """

    @abc.abstractmethod
    def validate(self, data: bytes) -> tuple[int, int]:
        """Check that ``data`` decodes the way PIL would accept it; used by the packer on every image.

        A file is accepted when PIL's ``Image.open(f).convert("RGB")`` would succeed:
        damage the codec works around (libjpeg's "extraneous bytes before marker", a
        corrupt-data warning) is reported as a :class:`DecodeWarning` per message, and
        a JPEG that ends early is refused ("truncated JPEG"), as PIL refuses it unless
        ``ImageFile.LOAD_TRUNCATED_IMAGES`` is set.

        Args:
            data: the encoded image.

        Returns:
            The full ``(height, width)``.

        Raises:
            DecodeError: with a short reason ("empty file", "not an image",
                "truncated JPEG", the pixel-limit message, the codec's own words, ...).
        """

    def decode_crop_into(
        self,
        data: bytes,
        box: Box | None,
        out: np.ndarray,
        *,
        resample: str | None = None,
        antialias: bool | None = None,
    ) -> None:
        """Decode the ``box`` of an image and resize it into ``out`` (e.g. one slot of a batch).

        The image is decoded at the smallest of :attr:`scales` that keeps the box at least ``out``'s size
        (``resample="antialias"``: :data:`~fastdata.decode.scaling.ANTIALIAS_HEADROOM` times it; other formats than
        JPEG then at full size), the box is mapped into the scaled pixels (``scaled_box`` of
        :mod:`fastdata.decode.scaling`) and resized into ``out`` (``resize_into``). Decoders that can decode only a
        region override this.

        Args:
            data: the encoded image.
            box: ``(top, left, height, width)`` in full-resolution pixels, inside the image;
                None for the whole image.
            out: writable, C-contiguous ``uint8`` array ``(H, W, 3)``; receives the RGB result.
            resample: one of :data:`~fastdata.decode.scaling.RESAMPLES`; None: ``"antialias"`` (PIL's antialiased
                bilinear, torchvision's pictures).
            antialias: 0.2.0's switch, instead of ``resample``: True is ``"area"``, False ``"linear"``.

        Raises:
            DecodeError: the image cannot be decoded.
            ValueError: ``box`` lies outside the image, ``out`` is not a uint8 ``(H, W, 3)`` array, or an unknown
                ``resample``.
        """
        check_out(out)
        mode = resample_mode(resample, antialias)
        room = headroom(mode)
        if mode != "antialias":
            scales = self.scales
        elif is_jpeg(data):  # the native kernel's scales: the same picture with or without it
            scales = tuple(scale for scale in self.scales if scale in KERNEL_SCALES) or ((1, 1),)
        else:  # PNG scales with OpenCV
            scales = ((1, 1),)
        out_h, out_w = out.shape[0] * room, out.shape[1] * room
        if box is None:  # the whole image as a box, as the native kernel takes it: at a reduced scale the resize
            box = (0, 0, *self._size_or_decode(data))  # reads the image's own extent, not its rounded-up pixels
        scale = choose_scale(scales, box[2], box[3], out_h, out_w)
        image = self.decode(data, scale=scale)
        y0, y1, x0, x1 = scaled_box(box, scale, image.shape[:2])
        resize_into(image[y0:y1, x0:x1], out, mode, region_box(box, scale, y0, x0))

    def _size_or_decode(self, data: bytes) -> tuple[int, int]:
        size = self.read_size(data)
        return size if size is not None else self.decode(data).shape[:2]

    def _check_scale(self, scale: Scale) -> Scale:
        scale = tuple(scale)  # type: ignore[assignment]
        if scale not in self.scales:
            raise ValueError(f"scale must be one of {self.scales} for {type(self).__name__}, got {scale!r}")
        return scale

    def __repr__(self) -> str:
        return f"{type(self).__name__}(scales={self.scales!r})"
