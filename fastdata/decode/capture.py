"""What codecs say about one image: their Python warnings and the lines their C libraries print.

libtiff (inside Pillow) and libjpeg (inside OpenCV) write warnings and errors straight to the
process's stderr (file descriptor 2), where nothing can tell which image they were about.
:func:`codec_messages` collects both kinds while one image is checked, so ``fastdata pack``
records them per file in the manifest (and ``verify`` stays quiet) instead of printing them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator

__all__ = ["codec_messages"]


_sink: tuple[int, int] | None = None  # (pid, file descriptor) of this process's scratch file


def _sink_fd() -> int:
    """A scratch file of this process (made once, unlinked, reused) that takes fd 2's output."""
    global _sink
    if _sink is None or _sink[0] != os.getpid():
        with tempfile.TemporaryFile() as handle:  # only its descriptor lives on, duplicated
            _sink = (os.getpid(), os.dup(handle.fileno()))
    return _sink[1]


@contextlib.contextmanager
def codec_messages() -> Iterator[list[str]]:
    """Collect Python warnings and native stderr output of the block into the yielded list.

    The list is filled when the block ends: warning messages first, then each non-empty
    line the C libraries printed, without duplicates. Python warnings are not shown.
    File descriptor 2 is redirected for the duration, so output of other threads of this
    process in that window is collected too: use it where one thread decodes (pack
    workers, ``verify``). It costs about 20 microseconds.

    Yields:
        The list of messages (empty until the block ends).
    """
    messages: list[str] = []
    sink = _sink_fd()
    os.ftruncate(sink, 0)
    os.lseek(sink, 0, os.SEEK_SET)  # fd 2 will share this offset
    sys.stderr.flush()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        saved = os.dup(2)
        os.dup2(sink, 2)
        try:
            yield messages
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            printed = os.pread(sink, os.fstat(sink).st_size, 0).decode("utf-8", errors="replace").splitlines()
            found = [str(w.message) for w in caught] + [line.strip() for line in printed]
            messages.extend(dict.fromkeys(m for m in found if m))
