"""Byte sizes written the way people write them: ``"256MB"``, ``"1GiB"``, ``"4096"``."""

from __future__ import annotations

import re

__all__ = ["parse_size"]

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "kib": 2**10,
    "m": 10**6,
    "mb": 10**6,
    "mib": 2**20,
    "g": 10**9,
    "gb": 10**9,
    "gib": 2**30,
}


def parse_size(text: str) -> int:
    """``"256MB"`` → 256000000, ``"1GiB"`` → 1073741824, ``"4096"`` → 4096.

    Raises:
        ValueError: ``text`` is not a number of bytes with an optional unit.
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"invalid size {text!r}: use bytes or a unit such as 256MB, 512MiB, 1GB")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
