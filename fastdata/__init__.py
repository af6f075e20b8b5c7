"""fastdata: make PyTorch image training never wait for data.

Pack an image folder into shards (:func:`pack`), or write them from Python (:func:`write`), read them with
:class:`ShardDataset`, load with :class:`DataLoaderX` + :func:`fast_collate`, and finish on the GPU with
:class:`DataPrefetcher` and :mod:`fastdata.gpu_transforms`. The DALI backend lives in :mod:`fastdata.dali`
(optional extra), the benchmark in :mod:`fastdata.bench`; neither is imported here. ARCHITECTURE.md maps the package.
"""

# numpy before torch: torch's C extension imports numpy itself and swallows any error there,
# a KeyboardInterrupt included, so a Ctrl-C during start-up would be lost (the command ran on).
import numpy  # noqa: E402, F401, I001

from fastdata import gpu_transforms, transforms
from fastdata._util.cpus import available_cpus
from fastdata._util.version import __version__
from fastdata.datasets import MixedDataset, ShardDataset
from fastdata.decode import get_decoder
from fastdata.formats import CorruptRecordError, DatasetChangedError, Manifest
from fastdata.loader import DataLoaderX, DataPrefetcher, NormalizeCollate, fast_collate
from fastdata.packing import ShardWriter, pack, repack, verify, write
from fastdata.sampler import DistributedSampler, EvalSampler, MixedSampler

__all__ = [
    "CorruptRecordError",
    "DataLoaderX",
    "DataPrefetcher",
    "DatasetChangedError",
    "DistributedSampler",
    "EvalSampler",
    "Manifest",
    "MixedDataset",
    "MixedSampler",
    "NormalizeCollate",
    "ShardDataset",
    "ShardWriter",
    "__version__",
    "available_cpus",
    "fast_collate",
    "get_decoder",
    "gpu_transforms",
    "pack",
    "repack",
    "transforms",
    "verify",
    "write",
]
