"""Exact distributed evaluation: every sample on exactly one rank, results gathered back in dataset order.

torch's ``DistributedSampler`` pads the last batch with duplicates so every rank gets as many
samples, and a metric averaged over the ranks is then not the metric over the set. Here rank ``r``
of ``W`` reads ``r, r + W, r + 2W, ...`` (the positions :class:`fastdata.DistributedSampler` gives
it, without the padding): the ranks' shares differ by at most one sample and together hold each
sample once. :func:`gather_in_order` collects each rank's per-sample results (predictions, losses,
correct flags) into one tensor in dataset order on every rank, so any metric computed from it equals
the single-process metric. :func:`interleave` is the same merge without ``torch.distributed``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence, Sized
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import Sampler

from fastdata.sampler.elastic import as_int

__all__ = ["EvalSampler", "gather_in_order", "interleave", "share"]


def _world(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    in_group = dist.is_available() and dist.is_initialized()
    size, own = (dist.get_world_size(), dist.get_rank()) if in_group else (1, 0)
    replicas = as_int(size if num_replicas is None else num_replicas, "num_replicas", "pass the number of ranks")
    rank = as_int(own if rank is None else rank, "rank", "pass this process's rank")
    if replicas < 1 or not 0 <= rank < replicas:
        raise ValueError(
            f"need num_replicas >= 1 and 0 <= rank < num_replicas, got num_replicas={replicas}, "
            f"rank={rank}; pass this process's rank and the number of ranks"
        )
    return replicas, rank


def share(length: int, replicas: int, rank: int) -> int:
    """Samples rank ``rank`` of ``replicas`` evaluates out of ``length`` (its positions ``rank::replicas``)."""
    return len(range(rank, length, replicas))


class EvalSampler(Sampler[int]):
    """Every sample exactly once over all ranks, no padding, no shuffle: for validation and test sets.

    Rank ``r`` of ``W`` yields ``r, r + W, r + 2W, ...`` below ``len(dataset)``; ranks may get one
    sample more than others (their last batch is then one smaller). Gather the per-sample results
    with :func:`gather_in_order`.

    Args:
        dataset: a sized dataset.
        num_replicas: number of ranks (default: the process group's world size, or 1 without one).
        rank: this process's rank (default: the process group's rank, or 0).

    Raises:
        TypeError: ``num_replicas`` or ``rank`` is not an int.
        ValueError: ``num_replicas < 1`` or ``rank`` outside ``[0, num_replicas - 1]``.

    Example::

        sampler = EvalSampler(val_set)
        loader = DataLoaderX(val_set, batch_size=250, sampler=sampler, collate_fn=fast_collate)
        correct = torch.cat([(model(x).argmax(1) == y).cpu() for x, y in DataPrefetcher(loader)])
        accuracy = gather_in_order(correct, sampler).float().mean()   # the accuracy over the whole set
    """

    def __init__(self, dataset: Sized, num_replicas: int | None = None, rank: int | None = None) -> None:
        self.dataset = dataset
        self.num_replicas, self.rank = _world(num_replicas, rank)
        self.length = len(dataset)
        self.num_samples = share(self.length, self.num_replicas, self.rank)
        self.epoch = 0

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.length, self.num_replicas))

    def set_epoch(self, epoch: int) -> None:
        """Accepted for symmetry with the training sampler; the order never changes."""
        self.epoch = as_int(epoch, "epoch", "pass the epoch number")

    def state_dict(self) -> dict[str, Any]:
        """``{"num_replicas", "rank", "dataset_length"}``: the order is fixed, so a resume restarts nothing."""
        return {"num_replicas": self.num_replicas, "rank": self.rank, "dataset_length": self.length}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Check a :meth:`state_dict` against this sampler (the order has nothing else to restore).

        Raises:
            ValueError: the state was taken over another dataset size or number of ranks.
        """
        if state.get("dataset_length") != self.length or state.get("num_replicas") != self.num_replicas:
            raise ValueError(
                f"state {state!r} was taken for another evaluation split than this sampler's "
                f"({self.num_replicas} ranks over {self.length} samples); build the same EvalSampler"
            )

    def __repr__(self) -> str:
        return f"EvalSampler(num_replicas={self.num_replicas}, rank={self.rank}, num_samples={self.num_samples})"


def interleave(parts: Sequence[Any], length: int | None = None) -> torch.Tensor:
    """Merge per-rank results into dataset order: ``parts[r][i]`` is the result of sample ``r + i * W``.

    Args:
        parts: one tensor (or array) per rank, of ``share(length, W, r)`` results each, same trailing shape.
        length: the dataset size (default: the sum of the parts' lengths).

    Returns:
        A tensor of ``length`` results, sample ``k``'s at row ``k``.

    Raises:
        ValueError: a part's length is not the share :class:`EvalSampler` gives its rank.
    """
    tensors = [torch.as_tensor(np.asarray(p) if not isinstance(p, torch.Tensor) else p) for p in parts]
    replicas = len(tensors)
    if replicas == 0:
        raise ValueError("interleave needs one part per rank, got none")
    total = sum(len(t) for t in tensors) if length is None else int(length)
    for r, t in enumerate(tensors):
        if len(t) != share(total, replicas, r):
            raise ValueError(
                f"rank {r} has {len(t)} results, its share of {total} samples over {replicas} ranks "
                f"is {share(total, replicas, r)}; pass one result per sample of EvalSampler's order"
            )
    out = tensors[0].new_empty((total, *tensors[0].shape[1:]))
    for r, t in enumerate(tensors):
        out[r::replicas] = t
    return out


def gather_in_order(values: Any, sampler: EvalSampler, *, group: Any = None) -> Any:
    """All ranks' per-sample results, in dataset order, on every rank (``all_gather``; gloo or NCCL).

    Args:
        values: this rank's results, one row per sample of ``sampler``'s order (``len(sampler)`` rows),
            on the device the process group's backend works on (CPU for gloo, CUDA for NCCL); or a
            Python list of one picklable object per sample (gathered with ``all_gather_object``).
        sampler: this rank's :class:`EvalSampler`.
        group: the process group (default: the world).

    Returns:
        ``len(sampler.dataset)`` rows, sample ``k``'s at row ``k`` (``values`` itself on one rank); a list
        for a list.

    Raises:
        ValueError: ``values`` does not hold one row per sample of this rank.
    """
    if isinstance(values, list):  # Python objects (file names, strings, dicts): pickled through all_gather_object
        return _gather_objects(values, sampler, group)
    values = torch.as_tensor(values)
    if len(values) != len(sampler):
        raise ValueError(
            f"values has {len(values)} rows, this rank evaluated {len(sampler)} samples; "
            "pass one result per sample, in the order the sampler gave them"
        )
    if sampler.num_replicas == 1:
        return values
    most = share(sampler.length, sampler.num_replicas, 0)  # rank 0 has the largest share
    padded = values.new_zeros((most, *values.shape[1:]))
    padded[: len(values)] = values
    gathered = [torch.empty_like(padded) for _ in range(sampler.num_replicas)]
    dist.all_gather(gathered, padded.contiguous(), group=group)
    parts = [g[: share(sampler.length, sampler.num_replicas, r)] for r, g in enumerate(gathered)]
    return interleave(parts, sampler.length)


def _gather_objects(values: list[Any], sampler: EvalSampler, group: Any) -> list[Any]:
    if len(values) != len(sampler):
        raise ValueError(
            f"values has {len(values)} items, this rank evaluated {len(sampler)} samples; "
            "pass one result per sample, in the order the sampler gave them"
        )
    if sampler.num_replicas == 1:
        return list(values)
    parts: list[Any] = [None] * sampler.num_replicas
    dist.all_gather_object(parts, values, group=group)
    merged: list[Any] = [None] * sampler.length
    for r, part in enumerate(parts):
        merged[r :: sampler.num_replicas] = part
    return merged
