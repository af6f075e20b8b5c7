"""Types of the C extension ``fastdata.packing._jpegtranscode`` (``_jpegtranscode.c``; its module docstring)."""

from typing_extensions import Buffer

def transcode(
    data: Buffer, mcus: int = 1, min_bytes: int = 0, max_pixels: int = 1 << 30, fit: bool = True
) -> bytes | None: ...
def restart_interval(data: Buffer, /) -> tuple[int, int] | None: ...
