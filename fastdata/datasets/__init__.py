"""The dataset side: map-style Datasets over packed shards.

:class:`ShardDataset` (:mod:`.shard_dataset`: a batch decoded in place by :mod:`.batch_decode`; a pack or
third-party TFRecord files opened and read through lazy per-process readers by :mod:`.shard_source`; TFRecord folders
found by :mod:`.tfrecord_folder`) and
:class:`MixedDataset` (:mod:`.mixture`: several datasets side by side, a mixture by proportion).
"""

from fastdata.datasets.mixture import MixedDataset
from fastdata.datasets.shard_dataset import ShardDataset

__all__ = ["MixedDataset", "ShardDataset"]
