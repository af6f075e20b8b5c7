"""Where ``fastdata.multicrop.MultiCrop`` was: it lives in :mod:`fastdata.transforms.multicrop` now."""

from fastdata.transforms.multicrop import MultiCrop

__all__ = ["MultiCrop"]
