"""Image folder to shards: scan (torchvision's ImageFolder rules), pack in a process pool, check.

- :mod:`~fastdata.packing.scan`: classes and files as ``torchvision.datasets.ImageFolder`` finds them, plus
  what it leaves out (unreadable folders, symlink loops, non-UTF-8 names) with the reason.
- :mod:`~fastdata.packing.packer`: :func:`pack` (worker processes, progress, skip-and-report, resume).
- :mod:`~fastdata.packing.plan`: the range plan (ranges of the sample list; a shard never crosses a range end).
- :mod:`~fastdata.packing.ranges`: one range packed as one task, published whole, its record last.
- :mod:`~fastdata.packing.engines`: who runs the range tasks (``local``, ``ray``, ``--part I/N``), one driver.
- :mod:`~fastdata.packing.merge`: part manifests and ``fastdata merge``; :mod:`~fastdata.packing.finish`: the
  labels and the manifest, written last.
- :mod:`~fastdata.packing.pool`: the packer's worker processes (ordered results, stop at once on Ctrl-C).
- :mod:`~fastdata.packing.writer`: :class:`ShardWriter` (size/count-bounded shards, written atomically).
- :mod:`~fastdata.packing.identity`: what a pack is made of (recorded options, source digest, fingerprint, plan),
  computed once, and every check that a ``--resume``, ``--append`` or ``fastdata merge`` matches it.
- :mod:`~fastdata.packing.journal`: the resume journal of finished shards (its lines written and read).
- :mod:`~fastdata.packing.lock`: one writer at a time (the output folder's lock).
- :mod:`~fastdata.packing.output`: the output folder (never a file fastdata did not write is deleted).
- :mod:`~fastdata.packing.space`: a full disk reported as such (:class:`OutOfSpaceError`, exit code 3).
- :mod:`~fastdata.packing.write`: :func:`write`: a pack from a Python iterable of ``(image bytes, label[, fields])``.
- :mod:`~fastdata.packing.check`: ``fastdata verify`` (:func:`verify`), shards checked side by side; its files
  (:mod:`~fastdata.packing.check_files`); ``fastdata inspect`` (:func:`describe`, :func:`summary`:
  :mod:`~fastdata.packing.summary`).
- :mod:`~fastdata.packing.transcode`: JPEGs re-coded losslessly with restart intervals (the C extension
  ``_jpegtranscode``).
- :mod:`~fastdata.packing.repack`: ``fastdata repack OLD NEW`` (:func:`repack`): an existing pack re-coded.
- :mod:`~fastdata.packing.command`: ``fastdata pack``'s flags and the summary it prints.
"""

from fastdata.packing.check import describe, verify
from fastdata.packing.lock import OutputLockedError
from fastdata.packing.packer import BadImageError, pack
from fastdata.packing.repack import repack
from fastdata.packing.scan import scan_image_folder
from fastdata.packing.space import OutOfSpaceError
from fastdata.packing.summary import summary
from fastdata.packing.write import write
from fastdata.packing.writer import ShardWriter

__all__ = [
    "BadImageError",
    "OutOfSpaceError",
    "OutputLockedError",
    "ShardWriter",
    "describe",
    "pack",
    "repack",
    "scan_image_folder",
    "summary",
    "verify",
    "write",
]
