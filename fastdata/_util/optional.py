"""The one place that detects optional packages and system libraries.

Every optional import in fastdata goes through here, so a missing piece always
fails (or falls back) with the same clear message that says how to install it.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)

TURBOJPEG_HINT = (
    "libturbojpeg is not available: install the system library "
    "(Debian/Ubuntu: `apt-get install -y libturbojpeg0`; conda: `conda install libjpeg-turbo`) "
    "and the Python binding (`pip install 'PyTurboJPEG>=1.7,<2'`)."
)
DALI_HINT = "NVIDIA DALI is not installed: `pip install 'fastdata[dali]'` (or `pip install nvidia-dali-cuda120`)."


@functools.cache
def turbojpeg_handle() -> Any:
    """Return a ready ``turbojpeg.TurboJPEG`` instance.

    Raises:
        ImportError: the PyTurboJPEG package or the libturbojpeg shared library is
            missing; the message says how to install both.
    """
    try:
        turbojpeg = importlib.import_module("turbojpeg")
    except ImportError as exc:
        raise ImportError(TURBOJPEG_HINT) from exc
    try:
        return turbojpeg.TurboJPEG()
    except (OSError, RuntimeError) as exc:  # the shared library could not be found or loaded
        raise ImportError(f"{TURBOJPEG_HINT} ({exc})") from exc


def has_turbojpeg() -> bool:
    """True when PyTurboJPEG and libturbojpeg both load."""
    try:
        turbojpeg_handle()
    except ImportError:
        return False
    return True


def import_dali() -> ModuleType:
    """Import ``nvidia.dali`` or raise ImportError with the install hint."""
    try:
        return importlib.import_module("nvidia.dali")
    except ImportError as exc:
        raise ImportError(DALI_HINT) from exc


def has_dali() -> bool:
    """True when ``nvidia.dali`` imports."""
    try:
        import_dali()
    except ImportError:
        return False
    return True


def native_disabled() -> bool:
    """True when the environment variable ``FASTDATA_NATIVE`` is ``"0"``: fastdata's C kernels are not used.

    Read at each call, so a test or a user can force the pure-Python/PyTurboJPEG fallback paths.
    """
    return os.environ.get("FASTDATA_NATIVE") == "0"
