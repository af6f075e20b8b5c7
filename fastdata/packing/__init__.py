"""Image folder to shards: scan (torchvision's ImageFolder rules), pack in a process pool, check.

- :mod:`~fastdata.packing.scan`: classes and files, exactly as ``torchvision.datasets.ImageFolder``.
- :mod:`~fastdata.packing.packer`: :func:`pack` (process pool, progress, skip-and-report, resume).
- :mod:`~fastdata.packing.writer`: :class:`ShardWriter` (size/count-bounded shards, written atomically).
- :mod:`~fastdata.packing.journal`: the resume journal of finished shards.
- :mod:`~fastdata.packing.check`: ``fastdata inspect`` (:func:`describe`) and ``fastdata verify`` (:func:`verify`).
"""

from fastdata.packing.check import describe, verify
from fastdata.packing.packer import BadImageError, pack
from fastdata.packing.scan import scan_image_folder
from fastdata.packing.writer import ShardWriter

__all__ = ["BadImageError", "ShardWriter", "describe", "pack", "scan_image_folder", "verify"]
