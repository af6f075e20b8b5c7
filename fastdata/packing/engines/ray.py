"""The ``ray`` engine: one Ray task per range, retried by Ray when its worker dies; progress from the driver.

Ray is an optional extra (``pip install fastdata[ray]``), imported only here. The cluster is the
one ``ray.init`` finds: ``--ray-address`` (``ray_address``), else ``RAY_ADDRESS``, else a Ray
already started in this process, else a local one on this machine. Every task reads SRC and writes
OUT itself, so on a cluster both must be visible from every node (a shared file system), or OUT
an object-store URL (each task uploads its shards, the driver the manifest).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from fastdata.packing.ranges import RangeTask, run_range

MAX_RETRIES = 3  # Ray re-runs a task whose worker died (killed, out of memory) up to this many times


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ImportError("--engine ray needs Ray: pip install 'fastdata[ray]' (or pip install ray)") from None
    return ray


class RayEngine:
    """Runs each range as a Ray task of one CPU (its images read in the task's own process)."""

    name = "ray"

    def __init__(self, address: str | None = None) -> None:
        self.address = address

    def run(self, tasks: Iterable[RangeTask]) -> Iterator[dict[str, Any]]:
        """Run the Ray tasks with a bounded number in flight.

        Keep twice the cluster's CPUs of tasks in flight; yield each range's record as its task finishes
        (in any order). Tasks are taken from ``tasks`` only as they are submitted.
        """
        ray = _import_ray()
        if not ray.is_initialized():
            ray.init(address=self.address, ignore_reinit_error=True, log_to_driver=False)
        remote = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(run_range)
        window = max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))  # tasks in flight: the rest not made yet
        tasks = iter(tasks)
        pending = [remote.remote(task) for task in itertools.islice(tasks, window)]
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                pending += [remote.remote(task) for task in itertools.islice(tasks, 1)]
                yield ray.get(done[0])
        finally:
            for ref in pending:  # an error or Ctrl-C in the driver: stop the other tasks too
                ray.cancel(ref, force=True)
