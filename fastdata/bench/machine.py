"""The machine a benchmark ran on, for its results file: the date, CPU, cores, RAM, GPU and library versions.

A number belongs to its day and its machine (a 2-core VM moves from day to day): the documentation quotes both from
here, never a number without them.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from fastdata._util.cpus import available_cpus

__all__ = ["machine_info"]


def _version(module: str, attr: str = "__version__") -> str | None:
    try:
        return str(getattr(importlib.import_module(module), attr))
    except Exception:  # noqa: BLE001 - a missing or broken optional package is just "not there"
        return None


def _dali_version() -> str | None:
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith("nvidia-dali"):
            return f"{dist.version} ({name})"
    return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
    """CPU, cores, RAM, GPU and the versions of every library in the measured pipelines."""
    import torch

    usable = available_cpus()
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else None
    info: dict[str, Any] = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),  # the day a number belongs to (docs quote it)
        "cpu": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable,
        "ram_gb": round(ram / 2**30, 1) if ram else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "numpy": np.__version__,
        "cv2": _version("cv2"),
        "pillow": _version("PIL"),
        "turbojpeg": _version("turbojpeg"),
        "dali": _dali_version(),
        "fastdata": _version("fastdata"),
        "cuda": torch.cuda.is_available(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    try:
        from fastdata._util.optional import has_turbojpeg

        info["libturbojpeg_loaded"] = has_turbojpeg()
    except ImportError:
        info["libturbojpeg_loaded"] = False
    return info
