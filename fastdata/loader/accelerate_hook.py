"""What ``DataLoaderX`` says when it is handed to Hugging Face Accelerate's ``accelerator.prepare()``.

Accelerate's ``prepare()`` rebuilds every ``torch.utils.data.DataLoader`` it is given as its own
``DataLoaderShard`` over a plain torch ``DataLoader``: the background thread, the reused batch buffers,
``fastdata.DistributedSampler``'s order and ``state_dict()`` would be gone without a word. Before it does,
it reads the loader's ``_is_accelerate_prepared`` flag, and leaves a loader that says ``True`` as it is.
``DataLoaderX`` answers through :func:`keep_for_accelerate`:

- its sampler already shards the data (``fastdata.DistributedSampler`` or torch's): the loader is kept as
  it is, with a warning that says what is still the caller's (moving batches to the device, checkpointing);
- otherwise Accelerate rebuilds it (it has to shard the data), with a warning that names the recipe that
  keeps ``DataLoaderX``.

The supported recipe (examples/tutorial_accelerate.py runs it)::

    model, optimizer = accelerator.prepare(model, optimizer)          # not the loader
    sampler = fastdata.DistributedSampler(dataset, num_replicas=accelerator.num_processes,
                                          rank=accelerator.process_index, seed=0)
    loader = fastdata.DataLoaderX(dataset, batch_size=64, sampler=sampler, collate_fn=fastdata.fast_collate)
    batches = fastdata.DataPrefetcher(loader, device=accelerator.device)
    accelerator.register_for_checkpointing(batches)                  # save_state/load_state resume mid-pass
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

from torch.utils.data import DistributedSampler as TorchDistributedSampler

from fastdata.sampler.distributed import DistributedSampler

__all__ = ["RECIPE", "keep_for_accelerate"]

RECIPE = (
    "prepare only the model and optimizer, give the loader a fastdata.DistributedSampler(dataset, "
    "num_replicas=accelerator.num_processes, rank=accelerator.process_index), iterate "
    "fastdata.DataPrefetcher(loader, device=accelerator.device) and "
    "accelerator.register_for_checkpointing(prefetcher) (examples/tutorial_accelerate.py)"
)


def _called_by_accelerate(depth: int) -> bool:
    frame = sys._getframe(depth + 1)
    return frame.f_globals.get("__name__", "").split(".")[0] == "accelerate"


def _shards(loader: Any) -> bool:
    sampler = loader.sampler
    if loader.batch_sampler is not None and hasattr(loader.batch_sampler, "sampler"):
        sampler = loader.batch_sampler.sampler
    return isinstance(sampler, (DistributedSampler, TorchDistributedSampler))


def keep_for_accelerate(loader: Any, marked: bool) -> bool:
    """The answer to Accelerate's ``_is_accelerate_prepared`` question (``marked``: already set by it).

    Warns (``UserWarning``) when Accelerate asks: that the loader is kept as it is, or that it is about to be
    replaced by a plain torch ``DataLoader`` and how to keep it.
    """
    if marked or not _called_by_accelerate(2):
        return marked
    if _shards(loader):
        warnings.warn(
            "accelerator.prepare() keeps this fastdata.DataLoaderX as it is (its sampler already shards "
            "the data): its batches stay on the CPU and its position is not in save_state(); iterate "
            "fastdata.DataPrefetcher(loader, device=accelerator.device) and "
            "accelerator.register_for_checkpointing(prefetcher)",
            UserWarning,
            stacklevel=4,
        )
        return True
    warnings.warn(
        "accelerator.prepare() replaces this fastdata.DataLoaderX with a plain torch DataLoader (no "
        "background thread, no exact resume, state_dict() lost); to keep it, " + RECIPE,
        UserWarning,
        stacklevel=4,
    )
    return False
