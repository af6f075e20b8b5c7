"""Deprecated: ``MultiCrop`` lives in :mod:`fastdata.transforms` now (removed in 0.3.0)."""

from fastdata._util.deprecation import warn_moved
from fastdata.transforms.multicrop import MultiCrop

warn_moved("fastdata.multicrop", "fastdata.transforms")

__all__ = ["MultiCrop"]
