"""The DALI backend (optional): :class:`DALILoader` over the same TFRecord shards, ``DataPrefetcher``'s contract.

- :mod:`~fastdata.dali.pipeline`: the DALI pipeline (reader, decode, crop, flip, normalize).
- :mod:`~fastdata.dali.loader`: :class:`DALILoader`, epochs, sharding across ranks, resume.

``nvidia.dali`` is imported only when a pipeline is built, so ``import fastdata.dali`` works without it.
"""

from fastdata.dali.loader import DALILoader
from fastdata.dali.pipeline import PipelineOptions, build_pipeline, shard_bounds

__all__ = ["DALILoader", "PipelineOptions", "build_pipeline", "shard_bounds"]
