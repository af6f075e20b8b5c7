"""Where ``fastdata.resolution`` was: the progressive-resolution schedule lives in
:mod:`fastdata.transforms.resolution` now (``ramp`` is also ``fastdata.transforms.ramp``).
"""

from fastdata.transforms.resolution import SizedBatch, ramp

__all__ = ["SizedBatch", "ramp"]
