"""The range plan: a pack cut into contiguous ranges of the sample list, each packed as one task.

A pack's samples (in source order, after the optional seeded shuffle) are cut into ranges of
``range_size`` samples (the last one shorter). A shard never crosses a range boundary, so each
range's shards can be written by any process on any machine, in any order, with their final
names; the plan depends only on the number of samples and the options, never on the engine or on
how many tasks run, so every engine (``local``, ``ray``, ``--part I/N``) writes the same bytes.

Shard names: a plan of one range (every pack of at most ``range_size`` samples) names its shards
``shard-00000.tfrecord``, ``shard-00001.tfrecord``, ... as packs always did; a plan of several
ranges names shard ``j`` of range ``r`` ``shard-RRRRR-JJJJJ.tfrecord`` (the manifest lists them in
order, so readers need no name rules).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from fastdata.packing.sources.base import Row, Source

DEFAULT_RANGE_SIZE = 10_000


@dataclass(frozen=True)
class RangePlan:
    """Contiguous ranges ``[start, stop)`` of the sample list.

    Attributes:
        samples: number of samples in the list.
        range_size: samples per range (the last range may be shorter).
    """

    samples: int
    range_size: int

    def __post_init__(self) -> None:
        if self.range_size <= 0:
            raise ValueError(f"range_size must be a positive number of samples, got {self.range_size!r}")

    def __len__(self) -> int:
        return max(1, -(-self.samples // self.range_size))

    def bounds(self, r: int) -> tuple[int, int]:
        """``(start, stop)`` of range ``r``."""
        if not 0 <= r < len(self):
            raise IndexError(f"range {r} is not in a plan of {len(self)} range(s)")
        return r * self.range_size, min(self.samples, (r + 1) * self.range_size)

    def shard_prefix(self, r: int) -> str:
        """The name prefix of range ``r``'s shards: ``"shard-"`` for a one-range plan, else ``"shard-RRRRR-"``."""
        return "shard-" if len(self) == 1 else f"shard-{r:05d}-"

    def part(self, index: int, parts: int) -> range:
        """The ranges of part ``index`` of ``parts`` (0-based): a contiguous block, as even as can be."""
        check_part(index, parts)
        return range(index * len(self) // parts, (index + 1) * len(self) // parts)


def make_plan(samples: int, range_size: int | None = None, samples_per_shard: int | None = None) -> RangePlan:
    """The plan for ``samples`` samples.

    ``range_size`` (default :data:`DEFAULT_RANGE_SIZE`) is rounded up
    to a multiple of ``samples_per_shard``, so that count-bounded shards are not cut short by a range end.
    """
    size = DEFAULT_RANGE_SIZE if range_size is None else range_size
    if not isinstance(size, int) or size <= 0:
        raise ValueError(f"range_size must be a positive number of samples, got {range_size!r}")
    if samples_per_shard:
        size = -(-size // samples_per_shard) * samples_per_shard
    return RangePlan(int(samples), size)


def check_part(index: int, parts: int) -> None:
    """Raise ``ValueError`` unless ``0 <= index < parts``."""
    if not isinstance(parts, int) or not isinstance(index, int) or parts <= 0 or not 0 <= index < parts:
        raise ValueError(f"part {index}/{parts} does not exist: use I/N with N >= 1 and 0 <= I < N (e.g. 0/4 .. 3/4)")


def parse_part(text: str) -> tuple[int, int]:
    """``"2/7"`` → ``(2, 7)`` (0-based part index of N parts)."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match:
        raise ValueError(f"invalid part {text!r}: use I/N, the 0-based part I of N (e.g. $SLURM_ARRAY_TASK_ID/16)")
    index, parts = int(match.group(1)), int(match.group(2))
    check_part(index, parts)
    return index, parts


def source_order(n: int, shuffle_seed: int | None) -> np.ndarray:
    """The order in which the ``n`` scanned samples are packed: as scanned, or a seeded shuffle."""
    if shuffle_seed is None:
        return np.arange(n)
    return np.random.default_rng(shuffle_seed).permutation(n)


def ordered_rows(source: Source, shuffle_seed: int | None) -> Iterator[Row]:
    """``source``'s rows in pack order: as scanned (streamed), or a seeded shuffle (which holds them in memory)."""
    if shuffle_seed is None:
        return source.scan()
    rows = list(source.scan())
    return iter([rows[i] for i in source_order(len(rows), shuffle_seed)])
