"""Which samples each rank reads, in which order: ``DistributedSampler`` with ``ratio`` passes per ``iter()``.

- :mod:`~fastdata.sampler.distributed`: :class:`DistributedSampler`, torch's at ``ratio=1``, resumable.
- :mod:`~fastdata.sampler.blocks`: the ``shuffle="blocks"`` order (a few shards at a time, still a permutation).
- :mod:`~fastdata.sampler.elastic`: resuming a checkpoint on another number of ranks.
"""

from fastdata.sampler.distributed import DistributedSampler
from fastdata.sampler.elastic import adapt_loader_state

__all__ = ["DistributedSampler", "adapt_loader_state"]
