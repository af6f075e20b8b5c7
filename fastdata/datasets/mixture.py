"""``MixedDataset``: several datasets read in fixed proportions per pass.

``MixedDataset``: several datasets read in fixed proportions per pass (ImageNet + a domain set, pre-training
mixtures).

The dataset is the sources side by side: index ``source_offsets[k] + i`` is sample ``i`` of source
``k``. Which samples a pass reads (how many from each source, in which order) is the business of
:class:`fastdata.sampler.MixedSampler`, which must be its sampler: it is deterministic, independent
of the number of ranks, resumable mid-pass, and resumable on another number of ranks.

Random decode-time transforms draw from the sample's generator as they do in a
:class:`~fastdata.ShardDataset`: the index handed to a source keeps the pass key and position of the
mixed index, so crops are the same whatever ``num_workers`` is and after a resume.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from fastdata.decode.batch import DecodedBatch, empty_tensor
from fastdata.sampler.seeding import SampleIndex, sample_generator, wants_sample_index
from fastdata.transforms import DecodeTransform
from fastdata.transforms.resolution import transform_for

__all__ = ["MixedDataset", "mixture_counts"]

_MODES = ("proportion", "repeat")


_WHOLE = 1e-6  # a repeat count this close below a whole number is that number (float products of decimal weights)


def mixture_counts(
    lengths: Sequence[int], weights: Sequence[float], mode: str, samples_per_pass: int | None
) -> list[int]:
    """Samples per pass of each source.

    ``"proportion"``: ``weights`` normalized, times ``samples_per_pass`` (default: the sources' total),
    rounded by largest remainders so the counts add up exactly. ``"repeat"``: ``weight * length`` rounded down, as
    MosaicML Streaming's ``int(repeat * samples)`` (2.0 reads a source twice per pass, 0.5 half of it: 3 of 7); a
    product within ``1e-6`` of a whole number counts as that number (``0.29 * 100`` is 29, not float's 28.99...).
    """
    if mode == "repeat":
        return [math.floor(w * n + _WHOLE) for w, n in zip(weights, lengths, strict=False)]
    total = sum(lengths) if samples_per_pass is None else samples_per_pass
    share = [w / sum(weights) * total for w in weights]
    counts = [int(math.floor(s)) for s in share]
    for k in sorted(range(len(share)), key=lambda i: (counts[i] - share[i], i))[: total - sum(counts)]:
        counts[k] += 1
    return counts


class MixedDataset(Dataset):
    """Sources read in given proportions (or repeats) per pass; pair it with :class:`~fastdata.sampler.MixedSampler`.

    Which samples a pass reads (:class:`~fastdata.sampler.MixedSampler`): a source of ``n`` samples read ``c`` times
    per pass reads each of its samples ``c // n`` or ``c // n + 1`` times in every pass (below once per pass: no sample
    twice in a pass; at least once: every sample in every pass), as MosaicML Streaming's ``proportion``/``repeat``
    do per epoch; and its stream is a sequence of seeded permutations continuing across passes, so no sample is
    read twice before all have been read once (0.5 covers the source every two passes, 2.5 reads it 2 or 3 times
    per pass and exactly 5 times every two passes). Streaming instead redraws a partial source's remainder each
    epoch (``sampling_method="balanced"``) or keeps the same one (``"fixed"``).

    Args:
        sources: ``[(dataset, weight), ...]`` (a bare dataset has weight 1). Each dataset is a sized
            map-style dataset returning ``(image, label)``, e.g. a :class:`~fastdata.ShardDataset`.
        mode: ``"proportion"``: weights are the shares of each pass (normalized); ``"repeat"``: each
            weight is how many times its source is read per pass (fractions allowed).
        samples_per_pass: with ``"proportion"``, the pass size (default: the sources' total length).

    Attributes:
        source_lengths: samples in each source.
        source_offsets: the first index of each source in this dataset.
        pass_counts: samples each pass reads from each source (exact, every pass).
        samples_per_pass: their sum.

    Raises:
        TypeError: a source is not a sized dataset, or a weight not a number.
        ValueError: no source, an empty source, a weight that is not finite and > 0, an unknown ``mode``,
            or ``samples_per_pass`` with ``mode="repeat"`` or below 1.

    Example::

        mixed = MixedDataset([(ShardDataset("imagenet", transform=RandomResizedCrop(224)), 0.8),
                              (ShardDataset("domain", transform=RandomResizedCrop(224)), 0.2)])
        sampler = MixedSampler(mixed, seed=0)            # rank and world from the process group
        loader = DataLoaderX(mixed, batch_size=256, sampler=sampler, num_workers=8, collate_fn=fast_collate)
    """

    #: DataLoaderX hands this dataset :class:`SampleIndex` indices; it passes them on to sources that want them.
    wants_sample_index = True

    def __init__(
        self, sources: Sequence[Any], *, mode: str = "proportion", samples_per_pass: int | None = None
    ) -> None:
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
        pairs = [s if isinstance(s, tuple) else (s, 1.0) for s in sources]
        if not pairs:
            raise ValueError("MixedDataset needs at least one source; pass [(dataset, weight), ...]")
        self.datasets: list[Any] = []
        self.weights: list[float] = []
        for k, pair in enumerate(pairs):
            if len(pair) != 2 or not hasattr(pair[0], "__len__") or not hasattr(pair[0], "__getitem__"):
                raise TypeError(f"source {k} must be (sized dataset, weight), got {pair!r}")
            dataset, weight = pair
            if isinstance(weight, bool) or not isinstance(weight, (int, float)):
                raise TypeError(f"source {k}'s weight must be a number, got {weight!r}")
            if not (math.isfinite(weight) and weight > 0):
                raise ValueError(f"source {k}'s weight must be finite and > 0, got {weight!r}; leave the source out")
            if len(dataset) == 0:
                raise ValueError(f"source {k} ({dataset!r}) is empty; leave it out")
            self.datasets.append(dataset)
            self.weights.append(float(weight))
        if samples_per_pass is not None and (mode == "repeat" or int(samples_per_pass) < 1):
            raise ValueError(f"samples_per_pass={samples_per_pass!r} needs mode='proportion' and a value >= 1")
        self.mode = mode
        self.source_lengths = [len(d) for d in self.datasets]
        self.source_offsets = np.concatenate([[0], np.cumsum(self.source_lengths)]).astype(np.int64)
        self.pass_counts = mixture_counts(
            self.source_lengths, self.weights, mode, None if samples_per_pass is None else int(samples_per_pass)
        )
        self.samples_per_pass = sum(self.pass_counts)

    def __len__(self) -> int:
        """All samples of all sources (the index space); a pass reads :attr:`samples_per_pass` of them."""
        return int(self.source_offsets[-1])

    def locate(self, index: int) -> tuple[int, Any]:
        """``(source, index into that source)``; the latter keeps a :class:`SampleIndex`'s pass key and position."""
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"index {index} is out of range for a MixedDataset of {n} samples")
        value = int(index) % n
        source = int(np.searchsorted(self.source_offsets, value, side="right")) - 1
        local = value - int(self.source_offsets[source])
        if isinstance(index, SampleIndex):
            return source, SampleIndex(local, index.pass_key, index.position)
        return source, local

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        source, local = self.locate(index)
        dataset = self.datasets[source]
        return dataset[local if wants_sample_index(dataset) else int(local)]  # a plain source gets a plain int

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[Any, Any]]:
        """A batch; decoded in place into one uint8 ``[N, H, W, 3]`` buffer when every source allows it.

        That is when each source has ``read()`` and a fixed-size decode-time transform of one size and no
        ``target_transform`` (``ShardDataset``s with ``RandomResizedCrop(224)``); otherwise ``[self[i] ...]``.
        """
        transforms = [transform_for(getattr(d, "transform", None), indices) for d in self.datasets]  # the loader's size
        size = self._common_size(transforms)
        if size is None:
            return [self[i] for i in indices]
        images = empty_tensor((len(indices), size[0], size[1], 3), torch.uint8)
        labels = empty_tensor((len(indices),), torch.int64)
        slots, label_view = images.numpy(), labels.numpy()
        for slot, index in enumerate(indices):
            source, local = self.locate(index)
            dataset = self.datasets[source]
            data, label_view[slot] = dataset.read(local)
            transform = transforms[source]
            transform.decode_into(data, slots[slot], rng=sample_generator(local) if transform.uses_rng else None)
        return DecodedBatch(images, labels)

    def _common_size(self, transforms: list[Any]) -> tuple[int, int] | None:
        sizes = set()
        for dataset, transform in zip(self.datasets, transforms, strict=False):
            if (
                not isinstance(transform, DecodeTransform)
                or getattr(dataset, "target_transform", None) is not None
                or not callable(getattr(dataset, "read", None))
            ):
                return None
            sizes.add(transform.output_size)
        return sizes.pop() if len(sizes) == 1 and None not in sizes else None

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{type(d).__name__}[{n}]x{c}"
            for d, n, c in zip(self.datasets, self.source_lengths, self.pass_counts, strict=False)
        )
        return f"MixedDataset({parts} per pass, mode={self.mode!r})"
