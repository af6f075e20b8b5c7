"""The ``local`` engine: this machine's process pool, one range after the other."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

from fastdata.packing.ranges import RangeTask, run_range


class LocalEngine:
    """Runs each range in this process, reading and validating its images in ``workers`` processes."""

    name = "local"

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def run(self, tasks: Iterable[RangeTask]) -> Iterator[dict[str, Any]]:
        """Pack ``tasks`` in order; yield each range's record as it is published."""
        for task in tasks:
            yield run_range(replace(task, workers=self.workers))
