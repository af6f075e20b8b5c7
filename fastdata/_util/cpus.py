"""The CPUs this process may really use: the default for worker, process and thread counts.

``os.cpu_count()`` reports the host's cores, whatever the job was given: under SLURM, Kubernetes
or a container with a CPU quota it can say 256 on a 2-CPU job, and defaults built on it
oversubscribe the job. :func:`available_cpus` detects the smallest of

- the affinity mask (``os.sched_getaffinity``: ``taskset``, cpusets, SLURM's binding),
- the cgroup CPU quota (cgroup v2 ``cpu.max``, or v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``),
  rounded up to whole CPUs, from the process's own cgroup up to the root,
- ``SLURM_CPUS_PER_TASK`` when set,

and is at least 1. ``FASTDATA_CPUS`` (a whole number >= 1), when set, overrides the detection: it *is* the count,
below the detected CPUs or above them (a warning then says that the job will be oversubscribed). A value that is
not a whole number >= 1 is ignored with a warning.
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["CGROUP_ROOT", "available_cpus", "cgroup_cpu_limit", "pin_to_one_core"]

#: Where the cgroup file system is mounted (``cgroup_root=`` overrides it, for tests).
CGROUP_ROOT = "/sys/fs/cgroup"
_ENV_OVERRIDE = "FASTDATA_CPUS"
_SLURM = "SLURM_CPUS_PER_TASK"


def _affinity() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1  # pragma: no cover - macOS, Windows


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _quota_v2(folder: Path) -> float | None:
    """CPUs allowed by ``folder/cpu.max`` (``"max 100000"``: none; ``"200000 100000"``: 2.0)."""
    text = _read(folder / "cpu.max")
    if not text:
        return None
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _quota_v1(folder: Path) -> float | None:
    """CPUs allowed by ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota -1: none)."""
    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    try:
        q, p = int(quota or ""), int(period or "")
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def _own_cgroups(proc_cgroup: Path) -> tuple[str | None, str | None]:
    """This process's cgroup path in the v2 hierarchy and in v1's ``cpu`` controller (None: unknown)."""
    v2 = v1 = None
    for line in (_read(proc_cgroup) or "").splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        if fields[0] == "0" and fields[1] == "":
            v2 = fields[2]
        elif "cpu" in fields[1].split(","):
            v1 = fields[2]
    return v2, v1


def _folders(base: Path, own: str | None) -> list[Path]:
    """``base`` joined with ``own`` and each of its parents, deepest first (just ``base`` without ``own``)."""
    parts = [p for p in (own or "").split("/") if p and p != ".."]
    return [base.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


def cgroup_cpu_limit(
    cgroup_root: str | os.PathLike | None = None, proc_cgroup: str | os.PathLike = "/proc/self/cgroup"
) -> float | None:
    """The cgroup CPU quota of this process in CPUs (e.g. 2.5), or None when there is none.

    The tightest quota of the process's cgroup and its ancestors, in the cgroup v2 hierarchy
    (``cpu.max``) or the v1 ``cpu`` controller (``cpu.cfs_quota_us``); a container sees its own
    cgroup as the root, so the root's files count too.

    Args:
        cgroup_root: where the cgroup file system is mounted (default ``CGROUP_ROOT``, ``/sys/fs/cgroup``).
        proc_cgroup: the file naming the process's cgroups.
    """
    base = Path(CGROUP_ROOT if cgroup_root is None else cgroup_root)
    v2, v1 = _own_cgroups(Path(proc_cgroup))
    limits = [q for f in _folders(base, v2) if (q := _quota_v2(f)) is not None]
    for v1_base in (base / "cpu", base / "cpu,cpuacct", base):
        limits += [q for f in _folders(v1_base, v1) if (q := _quota_v1(f)) is not None]
    return min(limits) if limits else None


def _env_count(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        warnings.warn(
            f"ignoring {name}={value!r}: not a whole number of CPUs >= 1; set e.g. {name}=4",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return count


def available_cpus(*, cgroup_root: str | os.PathLike | None = None) -> int:
    """The number of CPUs this process may use (see the module docstring), at least 1.

    Use it instead of ``os.cpu_count()`` for default worker, process and thread counts. ``FASTDATA_CPUS=N``
    makes it return ``N`` whatever was detected (with a ``RuntimeWarning`` when ``N`` is above the detected count).

    Args:
        cgroup_root: where the cgroup file system is mounted (default ``CGROUP_ROOT``, ``/sys/fs/cgroup``; tests
            point it at a folder holding a fake ``cpu.max``).

    Example::

        workers = available_cpus()          # e.g. 2 under `taskset -c 0,1`, or with cpu.max "200000 100000"
    """
    counts = [_affinity()]
    quota = cgroup_cpu_limit(cgroup_root)
    if quota is not None:
        counts.append(math.ceil(quota))
    slurm = _env_count(_SLURM)
    if slurm is not None:
        counts.append(slurm)
    detected = max(1, min(counts))
    override = _env_count(_ENV_OVERRIDE)
    if override is None:
        return detected
    if override > detected:
        warnings.warn(
            f"{_ENV_OVERRIDE}={override} is above the {detected} CPUs this process may use (affinity, "
            "cgroup quota, SLURM): worker and thread counts will oversubscribe them",
            RuntimeWarning,
            stacklevel=2,
        )
    return override


def pin_to_one_core(core: int | None = None) -> list[int]:
    """Pin this process to one core, and OpenCV and torch to one thread each.

    Pin this process to one core (``core``, or the last it may use) and OpenCV and torch to one thread each, as
    the one-core benchmarks measure; return the cores it could use before (``os.sched_setaffinity`` restores them).
    """
    import cv2
    import torch

    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[-1] if core is None else core})
    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    return cores
