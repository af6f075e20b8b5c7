"""Plan files: each planning process's next use of every shard, where eviction in any process of the node reads them.

``plans/<pid>.npy`` holds one int64 per shard: samples until that process next reads it, -1 for
never (within its horizon). Files are replaced atomically; a file whose process is gone is removed.
The cache folder is node-local, so process ids identify the planners.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def publish_plan(folder: Path, distances: np.ndarray | None) -> None:
    """Write (None: remove) this process's plan in ``folder``."""
    path = folder / f"{os.getpid()}.npy"
    if distances is None:
        path.unlink(missing_ok=True)
        return
    tmp = folder / f"{os.getpid()}.tmp.npy"
    with open(tmp, "wb") as f:
        np.save(f, np.asarray(distances, dtype=np.int64), allow_pickle=False)
    os.replace(tmp, path)


def read_plans(folder: Path, num_shards: int) -> tuple[np.ndarray, int]:
    """Per shard, the nearest next use over every live plan in ``folder`` (``inf``: none), and the plans read."""
    best = np.full(num_shards, np.inf)
    live = 0
    for path in folder.glob("*.npy"):
        try:
            pid = int(path.stem)
        except ValueError:
            continue  # a plan being written (<pid>.tmp.npy)
        if not _alive(pid):
            path.unlink(missing_ok=True)
            continue
        try:
            plan = np.load(path, allow_pickle=False)
        except (OSError, ValueError):
            continue  # removed right now
        if plan.shape == best.shape:
            best = np.minimum(best, np.where(plan >= 0, plan, np.inf))
            live += 1
    return best, live


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True
