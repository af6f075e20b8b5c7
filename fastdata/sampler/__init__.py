"""Which samples each rank reads, in which order: ``DistributedSampler`` with ``ratio`` passes per ``iter()``.

- :mod:`~fastdata.sampler.distributed`: :class:`DistributedSampler`, torch's at ``ratio=1``, resumable.
- :mod:`~fastdata.sampler.pass_order`: the indices of each of its passes on this rank, generated lazily.
- :mod:`~fastdata.sampler.blocks`: the ``shuffle="blocks"`` order (a few shards at a time, still a permutation).
- :mod:`~fastdata.sampler.index_shuffle`: ``shuffle="index"``/``"index-blocks"``, each index computed when read
  (O(1) memory per pass at any N), from the keyed bijection of :mod:`~fastdata.sampler.feistel`.
- :mod:`~fastdata.sampler.elastic`: resuming a checkpoint on another number of ranks.
- :mod:`~fastdata.sampler.mixture`: :class:`MixedSampler`, the order of a :class:`fastdata.MixedDataset`.
- :mod:`~fastdata.sampler.evaluation`: :class:`EvalSampler` (each sample once, no padding) and :func:`gather_in_order`.
"""

from fastdata.sampler.distributed import DistributedSampler
from fastdata.sampler.elastic import adapt_loader_state
from fastdata.sampler.evaluation import EvalSampler, gather_in_order
from fastdata.sampler.mixture import MixedSampler

__all__ = ["DistributedSampler", "EvalSampler", "MixedSampler", "adapt_loader_state", "gather_in_order"]
