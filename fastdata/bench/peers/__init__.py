"""The loaders a user would pick instead of fastdata, for ``fastdata bench --peers``.

Each peer is one small module with the same two functions, and imports its library only inside them:

- ``convert(images, labels, out_dir) -> dict``: write the images (encoded files, in the given order) with the
  peer's own writer into ``out_dir``; returns notes for the report (``{"note": ...}``, and ``"bytes"`` when the
  peer reads files outside ``out_dir``). The harness times it and measures the bytes on disk.
- ``loader(out_dir, batch_size, workers, size=224) -> iterable``: every pass yields ``(images, labels)`` batches,
  images uint8 ``[N, 3, size, size]`` (a decoded RandomResizedCrop(size) with a 50% horizontal flip), labels
  int64 ``[N]``; it may have a ``close()``.

Each module names its library (``LIBRARY``, the import name) and how to install it (``INSTALL``).
:mod:`~fastdata.bench.peers.harness` converts, builds, and formats the peer table.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

__all__ = ["PEERS", "load_peer", "unavailable"]

#: Peer name -> its module in this package.
PEERS: dict[str, str] = {
    "ffcv": "ffcv",
    "dali-files": "dali",
    "spdl": "spdl",
    "streaming": "streaming",
    "litdata": "litdata",
    "webdataset": "webdataset",
    "torchcodec": "torchcodec",
}


def load_peer(name: str) -> ModuleType:
    """The module of peer ``name`` (its library is not imported yet).

    Raises:
        ValueError: ``name`` is not a peer.
    """
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; choose from {', '.join(PEERS)}")
    return importlib.import_module(f"{__name__}.{PEERS[name]}")


def unavailable(name: str) -> str | None:
    """Why peer ``name`` cannot run here, in one line (None when its library imports).

    ``not installed: ...`` when its package is missing; ``cannot run here: ...`` when the package is there but does
    not load (e.g. a wheel built against another torch), with the reason.
    """
    module = load_peer(name)
    try:
        getattr(module, "import_library", lambda: importlib.import_module(module.LIBRARY))()
    except Exception as exc:  # noqa: BLE001 - any import failure means "cannot run", with the reason
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        what = "not installed" if _missing(module.LIBRARY, exc) else "cannot run here"
        return f"{what}: {type(exc).__name__}: {reason} (install: {module.INSTALL})"
    return None


def _missing(library: str, exc: Exception) -> bool:
    """Whether the import failed because the package is not there (rather than there and broken)."""
    if isinstance(exc, ModuleNotFoundError):
        return True
    try:
        return importlib.util.find_spec(library.split(".")[0]) is None
    except (ImportError, ValueError):  # a module object without a spec (already imported, or a stand-in)
        return False
