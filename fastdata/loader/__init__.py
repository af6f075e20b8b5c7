"""The loading side: ``DataLoaderX`` (background thread, exact resume), ``fast_collate`` and ``DataPrefetcher``.

- :mod:`~fastdata.loader.dataloader`: :class:`DataLoaderX`, torch's DataLoader with the same signature.
- :mod:`~fastdata.loader.background`: the stoppable prefetch thread and the pass iterator.
- :mod:`~fastdata.loader.resume`: what ``state_dict()`` holds and how a pass is replayed.
- :mod:`~fastdata.loader.loader_state`: ``DataLoaderX.state_dict()`` / ``load_state_dict()`` and their checks.
- :mod:`~fastdata.loader.collate`: :func:`fast_collate` (uint8 NCHW batches) and :class:`NormalizeCollate`
  (normalized float batches made in the workers, for CPU training).
- :mod:`~fastdata.loader.prefetcher`: :class:`DataPrefetcher`, the side-stream copy to the GPU.
"""

from fastdata.loader.collate import NormalizeCollate, fast_collate
from fastdata.loader.dataloader import DataLoaderX
from fastdata.loader.prefetcher import DataPrefetcher

__all__ = ["DataLoaderX", "DataPrefetcher", "NormalizeCollate", "fast_collate"]
