"""Where ``fastdata.cpus.available_cpus`` was: it lives in :mod:`fastdata._util.cpus` now."""

from fastdata._util.cpus import available_cpus

__all__ = ["available_cpus"]
