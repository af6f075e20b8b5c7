"""Image files that decoders disagree on, written byte by byte or with PIL in many modes.

Used by ``tools/pil_parity.py`` (the generated part of its corpus) and by the tests. Nothing is
downloaded: the hand-made files follow the format specifications (PNG, JPEG, BMP, TIFF), the
rest is written with Pillow.

- :func:`png_bomb` / :func:`jpeg_bomb`: valid, tiny files declaring huge images.
- :func:`apng_with_separate_default`, :func:`bitfield_bmp`, :func:`tiff`, :func:`jpeg_with_junk`:
  the files OpenCV decodes differently from PIL, or refuses.
- :func:`pil_mode_corpus`: every mode x format combination Pillow writes.
- :func:`corrupt`: random damage (byte changes, bit flips, cuts, insertions, truncation).
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image

__all__ = [
    "apng_with_separate_default",
    "bitfield_bmp",
    "corrupt",
    "jpeg_bomb",
    "jpeg_with_junk",
    "picture",
    "jpeg_variants",
    "pil_mode_corpus",
    "png_bomb",
    "tiff",
]


def picture(height: int, width: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    """A smooth uint8 test picture with some noise, ``(height, width, channels)``."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    planes = []
    for _c in range(channels):
        fx, fy, phase = rng.uniform(1, 4), rng.uniform(1, 4), rng.uniform(0, 6.3)
        planes.append(128 + 100 * np.sin(fx * 6.3 * xx / width + fy * 6.3 * yy / height + phase))
    image = np.stack(planes, axis=2) + rng.normal(0, 6, (height, width, channels))
    return np.clip(image, 0, 255).astype(np.uint8)


def _png_chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def png_bomb(width: int = 30000, height: int = 30000) -> bytes:
    """A valid 1-bit grayscale PNG of ``width x height`` black pixels (about 110 KB for 30000x30000).

    The pixel rows are compressed as they are produced, so making it needs no image in memory.
    """
    row = b"\x00" + bytes(-(-width // 8))  # filter byte "None", then the packed bits
    compressor = zlib.compressobj(9)
    batch = max(1, (8 << 20) // len(row))
    parts = [compressor.compress(row * min(batch, height - y)) for y in range(0, height, batch)]
    parts.append(compressor.flush())
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", b"".join(parts))
        + _png_chunk(b"IEND", b"")
    )


def _marker(code: int, payload: bytes) -> bytes:
    return bytes([0xFF, code]) + struct.pack(">H", len(payload) + 2) + payload


def jpeg_bomb(width: int = 20000, height: int = 20000, *, progressive: bool = True) -> bytes:
    """A valid grayscale JPEG of a uniform grey ``width x height`` image, about one bit per 8x8 block.

    Progressive (the default): one DC-only scan whose Huffman table has a single one-bit code,
    so 20000x20000 takes 781 KB (libjpeg leaves the coefficients of absent AC scans at zero; it
    holds them all in memory while decoding, 128 bytes per block). Baseline: a one-bit DC code
    and a one-bit end-of-block code per block (two bits), decoded in a single streaming pass.
    """
    blocks = -(-width // 8) * -(-height // 8)
    quant = _marker(0xDB, b"\x00" + bytes([1] * 64))
    frame = _marker(0xC2 if progressive else 0xC0, struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\x00")
    one_code = bytes([1] + [0] * 15) + b"\x00"  # a single symbol (0: DC difference 0, or AC end-of-block) -> "0"
    huffman = _marker(0xC4, b"\x00" + one_code + (b"" if progressive else b"\x10" + one_code))
    spectral_end = 0 if progressive else 63
    scan = _marker(0xDA, b"\x01\x01\x00\x00" + bytes([spectral_end]) + b"\x00")  # Ss=0, Se, Ah=Al=0
    nbits = blocks * (1 if progressive else 2)
    bits = bytes(nbits // 8) + (bytes([0xFF >> (nbits % 8)]) if nbits % 8 else b"")  # pad with 1-bits
    return b"\xff\xd8" + quant + frame + huffman + scan + bits + b"\xff\xd9"


def apng_with_separate_default(height: int = 40, width: int = 56) -> bytes:
    """An animated PNG whose default image (IDAT) is not part of the animation.

    PIL's ``Image.open`` gives the default image; a decoder that returns the first animation
    frame gives another picture.
    """
    frames = [Image.fromarray(picture(height, width, seed=s)) for s in (1, 2, 3)]
    buf = io.BytesIO()
    frames[0].save(buf, "PNG", save_all=True, append_images=frames[1:], default_image=True, duration=100)
    return buf.getvalue()


_BMP_BITFIELDS = 3


def bitfield_bmp(pixels: np.ndarray, bits: int, masks: tuple[int, int, int]) -> bytes:
    """An uncompressed ``BI_BITFIELDS`` BMP (BITMAPINFOHEADER + three masks) of RGB ``pixels``.

    Args:
        pixels: ``(h, w, 3)`` uint8 RGB.
        bits: 16 or 32 bits per pixel.
        masks: the red, green and blue bit masks, e.g. ``(0xF800, 0x07E0, 0x001F)`` (RGB 5-6-5).
    """
    height, width, _ = pixels.shape
    values = np.zeros((height, width), np.uint64)
    for channel, mask in enumerate(masks):
        shift, size = (mask & -mask).bit_length() - 1, bin(mask).count("1")
        values |= (pixels[..., channel].astype(np.uint64) >> (8 - size)) << shift
    rows = values.astype(np.uint16 if bits == 16 else np.uint32).astype(f"<u{bits // 8}")
    stride = -(-width * bits // 32) * 4
    body = b"".join(row.tobytes().ljust(stride, b"\x00") for row in rows[::-1])  # bottom-up
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, bits, _BMP_BITFIELDS, len(body), 2835, 2835, 0, 0)
    info += struct.pack("<III", *masks)
    offset = 14 + len(info)
    return b"BM" + struct.pack("<IHHI", offset + len(body), 0, 0, offset) + info + body


def tiff(
    data: bytes,
    width: int,
    height: int,
    *,
    bits: tuple[int, ...],
    photometric: int,
    extra_samples: tuple[int, ...] = (),
    sample_format: int = 1,
) -> bytes:
    """A little-endian, uncompressed, single-strip TIFF around already packed pixel ``data``.

    Args:
        data: the pixel rows, each padded to a whole byte, as TIFF stores them.
        width: image width.
        height: image height.
        bits: BitsPerSample, one entry per sample.
        photometric: 1 (BlackIsZero), 2 (RGB), ...
        extra_samples: ExtraSamples values (1: associated alpha, 2: unassociated alpha).
        sample_format: 1 (unsigned int), 3 (IEEE float).
    """
    samples = len(bits)
    tags = [
        (256, 4, [width]),
        (257, 4, [height]),
        (258, 3, list(bits)),
        (259, 3, [1]),
        (262, 3, [photometric]),
        (273, 4, [0]),
        (277, 3, [samples]),
        (278, 4, [height]),
        (279, 4, [len(data)]),
        (284, 3, [1]),
    ]
    if extra_samples:
        tags.append((338, 3, list(extra_samples)))
    if sample_format != 1:
        tags.append((339, 3, [sample_format] * samples))
    ifd_size = 2 + 12 * len(tags) + 4
    extra_at = 8 + ifd_size
    out_of_line = b""
    entries = []
    data_at = extra_at + sum(len(v) * (2 if t == 3 else 4) for _, t, v in tags if len(v) * (2 if t == 3 else 4) > 4)
    for tag, kind, values in tags:
        if tag == 273:
            values = [data_at]
        packed = struct.pack(f"<{len(values)}{'H' if kind == 3 else 'I'}", *values)
        if len(packed) <= 4:
            entries.append(struct.pack("<HHI", tag, kind, len(values)) + packed.ljust(4, b"\x00"))
        else:
            entries.append(struct.pack("<HHII", tag, kind, len(values), extra_at + len(out_of_line)))
            out_of_line += packed
    ifd = struct.pack("<H", len(tags)) + b"".join(entries) + b"\x00\x00\x00\x00"
    return b"II*\x00" + struct.pack("<I", 8) + ifd + out_of_line + data


def jpeg_with_junk(jpeg: bytes, marker: int = 0xC0, junk: bytes = b"\x01\x02\x03") -> bytes:
    """``jpeg`` with ``junk`` inserted before its first ``FF marker``.

    libjpeg warns ("Corrupt JPEG data: 3 extraneous bytes before marker 0xc0") and decodes it
    exactly as without the junk; PIL opens and decodes it.
    """
    at = jpeg.find(bytes([0xFF, marker]))
    if at < 0:
        raise ValueError(f"jpeg has no marker 0x{marker:02x}")
    return jpeg[:at] + junk + jpeg[at:]


def _save(image: Image.Image, fmt: str, **options) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, **options)
    return buf.getvalue()


def _mode_images(height: int, width: int) -> dict[str, Image.Image]:
    rgb = Image.fromarray(picture(height, width, seed=7))
    gray = np.asarray(rgb.convert("L"))
    alpha = Image.fromarray(picture(height, width, 1, seed=8)[..., 0])
    palette = rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=32)
    palette_t = palette.copy()
    palette_t.info["transparency"] = 3
    rgba = rgb.copy()
    rgba.putalpha(alpha)
    return {
        "1": rgb.convert("1"),
        "L": rgb.convert("L"),
        "P": palette,
        "P_transparent": palette_t,
        "LA": Image.merge("LA", (rgb.convert("L"), alpha)),
        "RGB": rgb,
        "RGBA": rgba,
        "I;16": Image.fromarray(gray.astype(np.uint16) * 300),
        "I": Image.fromarray(gray.astype(np.int32) * 3 - 100),
        "F": Image.fromarray(gray.astype(np.float32) * 1.3 - 20),
        "CMYK": rgb.convert("CMYK"),
        "YCbCr": rgb.convert("YCbCr"),
        "LAB": rgb.convert("LAB"),
        "HSV": rgb.convert("HSV"),
    }


_FORMAT_OPTIONS: dict[str, list[dict]] = {
    "PNG": [{}, {"optimize": True}],
    "BMP": [{}],
    "TIFF": [
        {},
        {"compression": "tiff_lzw"},
        {"compression": "tiff_deflate"},
        {"compression": "packbits"},
        {"compression": "tiff_adobe_deflate"},
        {"compression": "jpeg"},
        {"compression": "group4"},
    ],
    "GIF": [{}, {"interlace": False}],
    "PPM": [{}],
    "WEBP": [{"quality": 90}, {"lossless": True}],
    "JPEG": [
        {"quality": 90},
        {"quality": 75, "progressive": True},
        {"quality": 95, "subsampling": 0},
        {"quality": 85, "subsampling": 1},
        {"quality": 90, "optimize": True},
        {"quality": 80, "restart_marker_rows": 1},
    ],
}


def pil_mode_corpus(height: int = 37, width: int = 53) -> dict[str, bytes]:
    """Every (mode, format, options) Pillow writes without error, by name ``"TIFF/I;16/tiff_lzw"``."""
    corpus: dict[str, bytes] = {}
    for mode, image in _mode_images(height, width).items():
        for fmt, variants in _FORMAT_OPTIONS.items():
            for options in variants:
                label = "/".join([fmt, mode] + [f"{k}={v}" for k, v in options.items()])
                try:
                    corpus[label] = _save(image, fmt, **options)
                except (OSError, ValueError, KeyError, TypeError):
                    continue  # Pillow does not write this mode in this format
    corpus.update(_animations(height, width))
    corpus.update(_hand_made(height, width))
    return corpus


def _animations(height: int, width: int) -> dict[str, bytes]:
    frames = [Image.fromarray(picture(height, width, seed=s)) for s in (11, 12, 13)]
    gif_frames = [f.convert("P", palette=Image.Palette.ADAPTIVE, colors=16) for f in frames]
    return {
        "PNG/APNG/default_image": apng_with_separate_default(height, width),
        "PNG/APNG/dispose_blend": _save(frames[0], "PNG", save_all=True, append_images=frames[1:], disposal=2, blend=1),
        "GIF/animated/disposal": _save(
            gif_frames[0], "GIF", save_all=True, append_images=gif_frames[1:], disposal=2, transparency=0, duration=50
        ),
        "WEBP/animated": _save(frames[0], "WEBP", save_all=True, append_images=frames[1:], quality=90),
        "TIFF/multipage": _save(frames[0], "TIFF", save_all=True, append_images=frames[1:]),
    }


def _hand_made(height: int, width: int) -> dict[str, bytes]:
    rgb = picture(height, width, seed=21)
    rgba = np.dstack([rgb, picture(height, width, 1, seed=22)])
    premultiplied = rgba.copy()
    premultiplied[..., :3] = (rgba[..., :3].astype(np.uint16) * rgba[..., 3:] // 255).astype(np.uint8)
    gray = picture(height, width, 1, seed=23)[..., 0]
    jpeg = _save(Image.fromarray(rgb), "JPEG", quality=90)
    cases = {
        "BMP/bitfields/565": bitfield_bmp(rgb, 16, (0xF800, 0x07E0, 0x001F)),
        "BMP/bitfields/555": bitfield_bmp(rgb, 16, (0x7C00, 0x03E0, 0x001F)),
        "BMP/bitfields/XBGR": bitfield_bmp(rgb, 32, (0xFF000000, 0x00FF0000, 0x0000FF00)),
        "BMP/bitfields/BGXR": bitfield_bmp(rgb, 32, (0xFF000000, 0x0000FF00, 0x000000FF)),
        "TIFF/RGBA/associated": tiff(
            premultiplied.tobytes(), width, height, bits=(8,) * 4, photometric=2, extra_samples=(1,)
        ),
        "TIFF/RGBA/unassociated": tiff(rgba.tobytes(), width, height, bits=(8,) * 4, photometric=2, extra_samples=(2,)),
        "TIFF/L;16/hand": tiff((gray.astype("<u2") * 257).tobytes(), width, height, bits=(16,), photometric=1),
        "TIFF/F/hand": tiff(
            (gray.astype("<f4") / 255).tobytes(), width, height, bits=(32,), photometric=1, sample_format=3
        ),
        "JPEG/junk_before_SOF": jpeg_with_junk(jpeg, 0xC0),
        "JPEG/junk_before_SOS": jpeg_with_junk(jpeg, 0xDA, b"\x00" * 5),
        "JPEG/gray_bomb_small": jpeg_bomb(width, height),
        "PNG/bomb_small": png_bomb(width, height),
    }
    for depth in (2, 4):
        cases[f"TIFF/L;{depth}/hand"] = tiff(
            _pack_bits(gray >> (8 - depth), depth), width, height, bits=(depth,), photometric=1
        )
    return cases


def _pack_bits(values: np.ndarray, depth: int) -> bytes:
    """Pack ``depth``-bit values MSB first, each row padded to a whole byte (as TIFF and PNG store them)."""
    per_byte = 8 // depth
    height, width = values.shape
    padded = np.zeros((height, -(-width // per_byte) * per_byte), np.uint8)
    padded[:, :width] = values
    groups = padded.reshape(height, -1, per_byte).astype(np.uint16)
    shifts = np.arange(per_byte - 1, -1, -1, dtype=np.uint16) * depth
    return (groups << shifts).sum(axis=2).astype(np.uint8).tobytes()


def corrupt(data: bytes, rng: np.random.Generator, *, header: int = 700) -> bytes:
    """``data`` with 1-5 random edits, 80% of them in the first ``header`` bytes (markers and tables).

    Each edit sets a byte, flips a bit, deletes up to 19 bytes, inserts up to 7 random bytes,
    or cuts the file there.
    """
    out = bytearray(data)
    for _ in range(int(rng.integers(1, 6))):
        if len(out) < 2:
            break
        at = int(rng.integers(0, min(len(out), header) if rng.random() < 0.8 else len(out)))
        edit = rng.integers(0, 5)
        if edit == 0:
            out[at] = int(rng.integers(0, 256))
        elif edit == 1:
            out[at] ^= 1 << int(rng.integers(0, 8))
        elif edit == 2:
            del out[at : at + int(rng.integers(1, 20))]
        elif edit == 3:
            out[at:at] = rng.integers(0, 256, int(rng.integers(1, 8)), np.uint8).tobytes()
        else:
            del out[at:]
    return bytes(out)


def jpeg_variants(height: int = 40, width: int = 56) -> dict[str, bytes]:
    """Small JPEGs of each kind: baseline, progressive, grayscale, CMYK, with restart markers."""
    rgb = Image.fromarray(picture(height, width, seed=31))
    return {
        "baseline": _save(rgb, "JPEG", quality=90),
        "progressive": _save(rgb, "JPEG", quality=80, progressive=True),
        "gray": _save(rgb.convert("L"), "JPEG", quality=90),
        "cmyk": _save(rgb.convert("CMYK"), "JPEG", quality=90),
        "restart": _save(rgb, "JPEG", quality=85, restart_marker_blocks=2),
    }
