"""Pillow decoding: PNG, GIF, BMP, TIFF, WebP, PPM/PGM/PBM (and the JPEGs libjpeg-turbo's API cannot convert).

``torchvision.datasets.ImageFolder`` loads with ``PIL.Image.open(f).convert("RGB")``, so for
every format but JPEG fastdata decodes with Pillow itself and gets PIL's pixels by
construction: the default image of an animated PNG or GIF (not whichever frame another
decoder picks), 16-bit and float images clipped the way PIL clips them, alpha dropped (not
premultiplied), palettes, bitfield BMPs, CIELab and 2/4/12-bit TIFFs, and so on.

OpenCV is not used for these formats. It gives other pixels for many of them
(``tools/pil_parity.py``). Where it gives the same, on 8-bit PNGs such as the ImageNet-like
benchmark set's (1% of its images, identical pixels for all 99), it is 3-9% faster
(``bench/kernel.py png``: 3.9-4.7 against 4.0-5.0 ms per PNG over three runs), which at
that share is under 0.1% of the average decode time; it would need a per-file check of
what OpenCV gets right, and its libpng prints warnings ("iCCP: known incorrect sRGB
profile") on stderr that no caller can silence.

The file is identified among :data:`PIL_FORMATS` only (Pillow's other plugins, such as EPS,
which runs Ghostscript, are never tried), and the pixel limit is checked on the size the
header declares before any pixel is decoded.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import struct

import numpy as np
from PIL import Image, ImageFile

from fastdata.decode.base import DecodeError, check_not_empty
from fastdata.decode.headers import image_kind
from fastdata.decode.limits import check_pixels
from fastdata.decode.scaling import Scale, resize_to, scaled_size

for _plugin in ("Bmp", "Gif", "Jpeg", "Png", "Ppm", "Tiff", "WebP"):
    # importing a plugin registers its format in PIL.Image.OPEN; a Pillow built without libwebp has no WebP plugin
    with contextlib.suppress(ImportError):
        importlib.import_module(f"PIL.{_plugin}ImagePlugin")

__all__ = ["PIL_FORMATS", "open_image", "pil_decode", "pil_validate"]

#: The Pillow formats fastdata decodes, in the order they are tried.
PIL_FORMATS: tuple[str, ...] = tuple(f for f in ("JPEG", "PNG", "GIF", "BMP", "TIFF", "WEBP", "PPM") if f in Image.OPEN)
# What Pillow's plugins raise for "not this format", as Image.open treats it.
_NOT_THIS_FORMAT = (SyntaxError, IndexError, TypeError, struct.error)


def open_image(data: bytes) -> ImageFile.ImageFile:
    """Identify ``data`` among :data:`PIL_FORMATS` and read its header (no pixel is decoded).

    Args:
        data: the encoded image.

    Returns:
        The lazily opened Pillow image.

    Raises:
        DecodeError: not an image of these formats, a damaged header, or more pixels than
            the pixel limit allows (checked here, before anything is allocated).
    """
    check_not_empty(data)
    prefix = bytes(data[:16])
    reason = ""
    for name in PIL_FORMATS:
        factory, accept = Image.OPEN[name]
        accepted = accept(prefix) if accept is not None else True
        if not accepted or isinstance(accepted, str):  # a str is Pillow's "not without a codec" note
            reason = accepted if isinstance(accepted, str) else reason
            continue
        try:
            image = factory(io.BytesIO(data), "")
        except _NOT_THIS_FORMAT as exc:
            reason = f"{name}: {exc}"
            continue
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - Pillow's header parsers raise many types on bad input
            raise DecodeError(_reason(name, exc)) from exc
        check_pixels(image.size[1], image.size[0])
        return image
    kind = image_kind(data)
    if kind is None:
        raise DecodeError("not an image (fastdata reads JPEG, PNG, GIF, BMP, TIFF, WebP and PPM/PGM/PBM)")
    raise DecodeError(f"corrupt {kind} header ({reason})" if reason else f"corrupt {kind} header")


def _reason(name: str, exc: BaseException) -> str:
    message = str(exc) or type(exc).__name__
    if "truncated" in message:
        return f"truncated {name} ({message})"
    return f"corrupt {name} ({message})"


def _to_rgb(data: bytes) -> tuple[np.ndarray, str]:
    """``Image.open(data).convert("RGB")`` as a writable array, and the format's name."""
    image = open_image(data)
    name = image.format or "image"
    try:
        image.load()
        rgb = image if image.mode == "RGB" else image.convert("RGB")
        array = np.array(rgb)  # a copy: np.asarray would be a read-only view of Pillow's bytes
    except MemoryError:
        raise
    except Image.DecompressionBombError as exc:  # Pillow's own MAX_IMAGE_PIXELS, checked again when loading
        raise DecodeError(
            f"{exc} (Pillow's own limit PIL.Image.MAX_IMAGE_PIXELS: raise it to decode larger {name} files)"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - Pillow's decoders raise OSError, ValueError, EOFError, ... on bad data
        raise DecodeError(_reason(name, exc)) from exc
    finally:
        image.close()
    if array.ndim != 3 or array.shape[2] != 3 or 0 in array.shape:
        raise DecodeError(f"corrupt {name}: Pillow returned an array of shape {array.shape}")
    return array, name


def pil_decode(data: bytes, scale: Scale = (1, 1)) -> np.ndarray:
    """Decode with Pillow to RGB ``uint8`` ``(H, W, 3)``, exactly ``Image.open(f).convert("RGB")``.

    Args:
        data: the encoded image.
        scale: output size factor ``(num, den)``: the image is decoded fully and resized to
            ``scaled_size(h, w, scale)`` with ``INTER_AREA``.

    Returns:
        The image, C-contiguous and writable.

    Raises:
        DecodeError: the data is not an image Pillow reads here, is damaged or truncated
            (PIL's ``ImageFile.LOAD_TRUNCATED_IMAGES`` setting applies), or exceeds the pixel limit.
    """
    array, _ = _to_rgb(data)
    if tuple(scale) == (1, 1):
        return array
    return resize_to(array, *scaled_size(array.shape[0], array.shape[1], scale))


def pil_validate(data: bytes) -> tuple[int, int]:
    """Decode with Pillow as :func:`pil_decode` does; return the ``(height, width)``.

    Raises:
        DecodeError: as :func:`pil_decode`.
    """
    array, _ = _to_rgb(data)
    return array.shape[0], array.shape[1]
