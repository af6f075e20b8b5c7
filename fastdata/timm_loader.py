"""Deprecated: timm's loader functions live in :mod:`fastdata.integrations.timm` now (removed in 0.3.0)."""

from fastdata._util.deprecation import warn_moved
from fastdata.integrations.timm import TimmLoader, create_dataset, create_loader

warn_moved("fastdata.timm_loader", "fastdata.integrations.timm")

__all__ = ["TimmLoader", "create_dataset", "create_loader"]
