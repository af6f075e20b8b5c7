"""``ShardDataset``: a map-style Dataset over packed shards (LMDB or TFRecord) or plain TFRecord files."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
from torch.utils.data import Dataset

from fastdata._util.stage_clock import marker
from fastdata.datasets.batch_plan import BatchPlan
from fastdata.datasets.shard_source import ShardSource
from fastdata.datasets.tfrecord_folder import has_manifest, tfrecord_paths
from fastdata.formats.base import CorruptRecordError
from fastdata.formats.fields import decode_values, field_types
from fastdata.formats.open_readers import OpenReaders, check_max_open_shards
from fastdata.sampler.seeding import sample_generator
from fastdata.storage.shards import RemoteShards
from fastdata.storage.urls import is_url
from fastdata.transforms import Decode, DecodeTransform
from fastdata.transforms.base import RandomDecode
from fastdata.transforms.resolution import transform_for

logger = logging.getLogger(__name__)


class ShardDataset(ShardSource, Dataset):
    """Random access to the images of a packed dataset (or of third-party TFRecord files).

    ``ds[i]`` returns ``(image, label)``, or ``(image, label, {name: value})`` with ``fields``. By default the image
    is the decoded RGB uint8 ``(H, W, 3)`` numpy array; a decode-time transform from :mod:`fastdata.transforms`
    (``RandomResizedCrop(224)``) gets the encoded bytes and decodes only its crop; any other callable gets the
    decoded array. Every read is checked, the dataset pickles for any DataLoader start method, and under
    :class:`~fastdata.DataLoaderX` random crops are the same for any ``num_workers`` and after a resume.
    :doc:`/concepts/dataset` explains the checks, the seeding, open files and datasets at a URL.

    Args:
        root: a folder written by ``fastdata pack``; or, without a manifest, TFRecord files as a
            folder, a file, a glob pattern or a list of paths (records with the ImageNet feature
            keys ``image/encoded`` and ``image/class/label``). Missing index files are built.
        transform: applied to each sample: a :class:`~fastdata.transforms.DecodeTransform` gets the encoded bytes,
            any other callable the decoded array.
        target_transform: applied to each label.
        label_offset: added to the labels stored in third-party TFRecords (e.g. -1 for
            TensorFlow's 1-based ImageNet records).
        decoder: decoder for the default decode (``"auto"``, ``"turbojpeg"``, ``"opencv"``).
        cache_dir: for a dataset at a URL (``s3://``, ``gs://``, ``https://``, any fsspec URL), the
            node-local folder its shards are cached in, shared by every rank and worker of the node
            (default ``$FASTDATA_CACHE`` or ``~/.cache/fastdata``). Ignored for local datasets.
        cache_limit: byte budget of the cached shards (``"200GB"``, ``"512MiB"`` or an int; None: no
            limit). Shards nobody reads are evicted, the one needed furthest in the future first.
        prefetch: shards downloaded ahead of the reader, in the order the loader will read them.
        decode_threads: threads decoding a batch in one native call (``RandomResizedCrop``;
                :mod:`fastdata.datasets.batch_decode`).
        fields: names of fields kept at pack time (``--fields``); ``ds[i]`` is then ``(image, label, {name: value})``,
            typed as :mod:`fastdata.formats.fields` says. ``ValueError`` names the fields a pack has.
        max_open_shards: shard files each process (the main one, every DataLoader worker) keeps open at once;
            beyond it the least recently used is closed, and opened again (and checked again) when next read.
            None (default): a quarter of the process's soft ``RLIMIT_NOFILE`` (``ulimit -n``; 256 of 1024), at
            most 1024; a remote dataset's cached shards count double (each holds a lock too). A bound above the
            limit is safe: opening a shard that would leave fewer than 64 descriptors (a quarter of a smaller
            limit) to the rest of the process closes the least recently used shards first, and raises
            ``OSError`` (``EMFILE``) naming the limit only when no open shard is left to close.

    Raises:
        FileNotFoundError: no manifest and no TFRecord files, or a file the manifest names is missing.
        ValueError: the manifest is malformed (one line naming the field), ``cache_limit`` is not a size
            (or below the minimum), or ``max_open_shards < 1``.
        TypeError: ``max_open_shards`` is not an int or None.
        CorruptRecordError: a file the manifest names is outside the folder, not a regular file,
            of the wrong size or checksum, or disagrees with the manifest's counts (a shard's own count
            and ``.idx``: raised by the first read of that shard, naming the file).
        UnfinishedPackError: (a ``ValueError``) ``root`` is a folder ``fastdata pack`` is still writing, or left
            unfinished (no ``manifest.json`` yet): the message names the writer (pid, host, start).

    Example:
        >>> from fastdata.transforms import RandomResizedCrop
        >>> ds = ShardDataset("packed", transform=RandomResizedCrop(64))
        >>> image, label = ds[0]
        >>> image.shape, image.dtype
        ((64, 64, 3), dtype('uint8'))
    """

    #: DataLoaderX hands this dataset :class:`~fastdata.sampler.seeding.SampleIndex` indices, to seed its crops.
    wants_sample_index = True

    def __init__(
        self,
        root: str | os.PathLike | Sequence[str | os.PathLike],
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        *,
        label_offset: int = 0,
        decoder: str = "auto",
        cache_dir: str | os.PathLike | None = None,
        cache_limit: int | str | None = None,
        prefetch: int = 4,
        decode_threads: int = 1,
        fields: Sequence[str] | None = None,
        max_open_shards: int | None = None,
    ) -> None:
        self.root = root
        self.transform = transform
        self.target_transform = target_transform
        self.label_offset = int(label_offset)
        self.decoder = decoder
        self.decode_threads = int(decode_threads)  # checked by decode_batch_into
        self._decode = Decode(decoder=decoder)
        self.max_open_shards = check_max_open_shards(max_open_shards)
        self._readers = OpenReaders(self.max_open_shards)  # pickles without its readers; a forked child drops them
        self._remote: RemoteShards | None = None
        if isinstance(root, str) and is_url(root):
            self._remote = RemoteShards(
                root,
                cache_dir=cache_dir,
                cache_limit=cache_limit,
                prefetch=prefetch,
                max_open_shards=self.max_open_shards,
            )
            self._init_packed(self._remote.meta_root, shards_here=False)
            self._root = self._remote.url  # type: ignore[assignment]
        elif has_manifest(root):
            self._init_packed(Path(root))  # type: ignore[arg-type]
        else:
            self._init_tfrecords(tfrecord_paths(root))
        self.fields, self._field_types = field_types(self.manifest, fields)

    # -- Dataset API ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, index: int) -> tuple[Any, ...]:
        data, label = self.read(index)
        if isinstance(self.transform, DecodeTransform):
            rng = sample_generator(index) if self.transform.uses_rng else None
            image = self.transform(data) if rng is None else cast(RandomDecode, self.transform)(data, rng=rng)
        else:
            image = self._decode(data)
            if self.transform is not None:
                image = self.transform(image)
        if self.target_transform is not None:
            label = self.target_transform(label)
        return (image, label, self.read_fields(index)) if self.fields else (image, label)

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[Any, ...]]:
        """The samples of one batch; torch's fetcher calls this with the batch's indices.

        With a fixed-size decode-time transform (``RandomResizedCrop``, ``ResizeCenterCrop``), no
        ``target_transform`` and no fields, every image is decoded straight into its slot of one uint8
        ``[N, H, W, 3]`` tensor (shared memory in a worker): a :class:`~fastdata.decode.batch.DecodedBatch`, which
        :func:`fastdata.fast_collate` passes on without a copy and other collate functions see as the
        usual list of ``(image, label)`` pairs. Otherwise it is ``[self[i] for i in indices]``.
        """
        mark = marker()  # per-stage CPU time for `fastdata bench --breakdown`; a no-op otherwise
        mark("alloc")
        plan = self.batch_plan(indices)
        if plan is None:
            transform = transform_for(self.transform, indices)  # at the loader's resolution
            if callable(getattr(transform, "decode_batch", None)) and self.target_transform is None and not self.fields:
                return transform.decode_batch(self, indices)  # a transform with several outputs (MultiCrop)
            return [self[i] for i in indices]
        plan.fill(0, len(plan), threads=self.decode_threads)
        batch = plan.batch()
        mark("worker_loop")
        return batch

    def batch_plan(self, indices: Sequence[Any]) -> BatchPlan | None:
        """The batch of ``indices`` to decode straight into its tensors, a range at a time, or None.

        None when this dataset makes its batches otherwise (no fixed-size decode-time transform, a
        ``target_transform``, fields, or a transform with several outputs). ``DataLoaderX(worker_mode="thread")``
        splits a plan among its threads.
        """
        transform = transform_for(self.transform, indices)  # at the loader's resolution
        if callable(getattr(transform, "decode_batch", None)):
            return None
        size = getattr(transform, "output_size", None)
        if size is None or self.target_transform or not isinstance(transform, DecodeTransform) or self.fields:
            return None
        return BatchPlan(self, transform, indices)

    def read(self, index: int) -> tuple[bytes, int]:
        """The encoded image bytes and label of sample ``index``, without decoding.

        Raises:
            IndexError: ``index`` is out of range.
            CorruptRecordError: the record fails a check (its CRC, framing, or its own label differs
                from ``targets.npy``); the message names the shard, the record and the ``fastdata
                verify`` to run.
            DatasetChangedError: the dataset's files were replaced after this dataset opened them.
            FileNotFoundError: the shard's ``.idx`` (read where a process first reads the shard) is missing.
        """
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"index {index} is out of range for a dataset of {n} samples")
        index = int(index) % n
        shard = int(np.searchsorted(self._starts, index, side="right")) - 1
        position = index - int(self._starts[shard])  # the record's number in its shard, until located
        try:
            if self._remote is not None:  # a URL: through the node's shard cache
                position, size = self._locate(shard, position)
                data, label = self._remote.read(shard, position, size)
            else:
                reader = self._reader(shard)  # first: a shard replaced since the open says so before its index
                position, size = self._locate(shard, position)
                data, label = reader.read(position, size)
            if self._pack is not None:
                label = self._checked_label(
                    shard, position, label, int(self._shard_labels(shard)[index - int(self._starts[shard])])
                )
        except CorruptRecordError as exc:
            raise exc.with_hint(self._verify_hint(index)) from None
        if label is None:  # a third-party record without an integer label
            raise CorruptRecordError(
                self._shard_paths[shard], position, "the record has no integer label (image/class/label)"
            ).with_hint(self._verify_hint(index))
        return data, int(label)

    def read_fields(self, index: int) -> dict[str, Any]:
        """The fields (``fields=``) of sample ``index``, typed as the manifest records them (CRC-checked)."""
        index = int(index) % len(self)
        shard = int(np.searchsorted(self._starts, index, side="right")) - 1
        reader = self._reader(shard)
        feature = reader.read_fields(*self._locate(shard, index - int(self._starts[shard])))
        return decode_values(self._field_types, self.fields, feature)

    def _checked_label(self, shard: int, position: int, label: int | None, packed: int) -> int:
        """The label of a packed sample, checked against the record's own.

        The label of a packed sample: ``packed`` (``targets.npy``'s), which must equal the record's own (when it
        has one).
        """
        if label is not None and label != packed:
            raise CorruptRecordError(
                self._shard_paths[shard],
                position,
                f"the record's own label {label} differs from {packed} in "
                f"{self.manifest.targets if self.manifest is not None else 'targets.npy'} "
                "(mixed packs, or damage)",
            )
        return packed + self.label_offset

    def _verify_hint(self, index: int) -> str:
        if self._root is None:  # third-party TFRecords: there is no manifest to verify against
            return f"sample {index}"
        return f"sample {index}; run `fastdata verify {self._root}`"

    @property
    def remote(self) -> bool:
        """True for a dataset read from a URL through the node's shard cache."""
        return self._remote is not None

    def plan(self, order: Iterable[Any], *, lag: int = 0) -> Iterable[Any]:
        """Announce a pass's order: for a remote dataset, its shards are downloaded ahead, in that order.

        :class:`~fastdata.DataLoaderX` calls this itself (in the main process, at the start of every
        pass). With another loader, wrap the sampler: ``for i in ds.plan(sampler): ...``.

        Args:
            order: the pass's indices, or batches of indices (read a little ahead of the caller).
            lag: items handed out that are still being read (the loader's batches in flight).

        Returns:
            ``order``'s items, unchanged (``order`` itself for a local dataset).
        """
        if self._remote is None:
            return order
        return self._remote.plan(order, self._starts, lag=lag)

    @property
    def targets(self) -> np.ndarray:
        """int64 label of every sample.

        For a pack, a read-only view of its ``targets.npy``, mapped on first use (shared by every process, never
        copied; a new array when ``label_offset`` is set). For third-party TFRecords this reads every record once.
        """
        if self._pack is not None:
            stored = self._pack.targets
            return stored + np.int64(self.label_offset) if self.label_offset else np.asarray(stored, dtype=np.int64)
        if self._targets is None:
            self._targets = np.fromiter((self.read(i)[1] for i in range(len(self))), dtype=np.int64, count=len(self))
        return self._targets

    @property
    def shard_offsets(self) -> np.ndarray:
        """Read-only int64 array of ``num_shards + 1`` entries: the first sample index of each shard, then ``len``.

        Samples ``shard_offsets[k]`` to ``shard_offsets[k + 1] - 1`` live in shard ``k``
        (``DistributedSampler(shuffle="blocks")`` reads it to keep a node on a few shards at a time).
        """
        offsets = self._starts.view()
        offsets.flags.writeable = False
        return offsets

    @property
    def class_to_idx(self) -> dict[str, int]:
        """Class name → label."""
        return {name: i for i, name in enumerate(self.classes)}

    def __repr__(self) -> str:
        where = self._root if self._root is not None else f"{len(self._shard_paths)} TFRecord files"
        return f"{type(self).__name__}({where}, format={self.format}, samples={len(self)}, classes={len(self.classes)})"
