"""One warning for a moved import path, so that every old path says the same thing the same way."""

from __future__ import annotations

import warnings

__all__ = ["REMOVED_IN", "warn_moved"]

#: The release that removes the deprecated import paths (docs/versioning.md: one minor release of warning).
REMOVED_IN = "0.3.0"


def warn_moved(old: str, new: str) -> None:
    """Warn, once per import, that module ``old`` moved to ``new`` and goes away in :data:`REMOVED_IN`.

    Args:
        old: the deprecated module path, e.g. ``"fastdata.multicrop"``.
        new: where its names live now, e.g. ``"fastdata.transforms"``.
    """
    warnings.warn(
        f"{old} is deprecated and will be removed in fastdata {REMOVED_IN}: import from {new} instead",
        DeprecationWarning,
        stacklevel=3,  # the module that imported the old path (past this function and the old module's body)
    )
