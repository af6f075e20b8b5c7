"""Deprecated: the progressive-resolution schedule lives in :mod:`fastdata.transforms` now (removed in 0.3.0)."""

from fastdata._util.deprecation import warn_moved
from fastdata.transforms.resolution import SizedBatch, ramp

warn_moved("fastdata.resolution", "fastdata.transforms")

__all__ = ["SizedBatch", "ramp"]
