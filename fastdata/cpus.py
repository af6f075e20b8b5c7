"""Deprecated: ``available_cpus`` is :func:`fastdata.available_cpus` now (removed in 0.3.0)."""

from fastdata._util.cpus import available_cpus
from fastdata._util.deprecation import warn_moved

warn_moved("fastdata.cpus", "fastdata (fastdata.available_cpus)")

__all__ = ["available_cpus"]
