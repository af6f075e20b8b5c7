"""Which records pack re-coded, kept in manifest bytes that grow with the shards, not with the samples.

The manifest records a count per shard (``ShardInfo.transcoded``) and their sum (``transcoded_records``). A
shard whose records were all re-coded, or none, needs nothing more. Only when some shard holds both kinds (a
PNG among JPEGs, a JPEG libjpeg warns about, any ``--shuffle-seed`` pack of mixed files) does pack write the
side file ``transcoded.bits``: one bit per sample in dataset order, least significant bit first
(``numpy.packbits(..., bitorder="little")``), ``ceil(samples / 8)`` bytes: 12.5 MB at 100M samples, where
``[start, stop)`` ranges of 10% scattered PNGs took 360 MB of JSON. Like every file of a pack it is written
before the manifest, which records its name, size and CRC32C; :meth:`TranscodedRecords.load` checks all three,
and that each shard's bits add up to its count, before a bit is used.

Manifests written before the counts list ``transcoded`` ranges instead; they are still read (and an append
rewrites them in this form).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fastdata._util.fs import atomic_write_bytes
from fastdata.formats.errors import CorruptRecordError
from fastdata.formats.files import check_crc32c, crc32c_hex, read_regular, resolve_inside
from fastdata.formats.manifest_entries import ShardInfo

if TYPE_CHECKING:
    from fastdata.formats.manifest import Manifest

__all__ = ["BITS_NAME", "TranscodedBits", "TranscodedRecords", "bits_name"]

BITS_NAME = "transcoded.bits"
_NUMBERED = re.compile(r"targets-(\d+)\.npy")


def bits_name(targets: str) -> str:
    """The transcoded side file that goes with a labels file.

    The side file that goes with a labels file: ``targets.npy`` → ``transcoded.bits``, ``targets-3.npy`` →
    ``transcoded-3.bits`` (an append writes new ones beside the old, which a reader of the old manifest still uses).
    """
    match = _NUMBERED.fullmatch(Path(targets).name)
    return f"transcoded-{match.group(1)}.bits" if match else BITS_NAME


class TranscodedBits:
    """The transcoded records of a pack being finished, shard by shard in dataset order (``ceil(samples / 8)`` bytes).

    Args:
        samples: the pack's number of samples.
    """

    def __init__(self, samples: int) -> None:
        self.samples = samples
        self.bits = np.zeros((samples + 7) // 8, np.uint8)
        self.shards: list[ShardInfo] = []
        self._next = 0
        self._partial = False

    def add(self, shard: ShardInfo | None, samples: int, positions: Sequence[int] | np.ndarray) -> None:
        """The next ``samples`` samples, of which ``positions`` were re-coded.

        The next ``samples`` samples (``shard``'s records; None: no shard), of which ``positions`` (indices in
        the shard, or a bool per record) were re-coded.
        """
        first, self._next = self._next, self._next + samples
        index = np.asarray(positions)
        index = (np.flatnonzero(index) if index.dtype == np.bool_ else index).astype(np.int64)
        if len(index) and (index.min() < 0 or index.max() >= samples):
            raise ValueError(
                f"transcoded positions must lie in [0, {samples}), got {int(index.min())}..{int(index.max())}"
            )
        index = np.unique(index) + first
        np.bitwise_or.at(self.bits, index >> 3, (1 << (index & 7)).astype(np.uint8))
        if shard is not None:
            self.shards.append(replace(shard, transcoded=len(index)))
            self._partial |= 0 < len(index) < samples

    def write(self, out: Path, targets: str) -> dict[str, Any]:
        """Write the transcoded side file if needed; return the manifest's fields for it.

        Write the side file beside ``targets`` if some shard is partly re-coded; return the manifest's fields
        (``transcoded_records`` and, with the file, ``transcoded_file/_nbytes/_crc32c``).
        """
        if self._next != self.samples:
            raise ValueError(f"the shards hold {self._next} samples, not the {self.samples} expected")
        fields: dict[str, Any] = {"transcoded_records": sum(s.transcoded or 0 for s in self.shards)}
        if self._partial:
            data = self.bits.tobytes()
            name = bits_name(targets)
            atomic_write_bytes(out / name, data)
            fields.update(transcoded_file=name, transcoded_nbytes=len(data), transcoded_crc32c=crc32c_hex(data))
        return fields


class TranscodedRecords:
    """Which records of a finished pack were re-coded, read from its manifest (and side file), checked.

    Attributes:
        count: how many (None: the manifest predates any record of it).
    """

    def __init__(self, manifest: Manifest, bits: np.ndarray | None) -> None:
        self.manifest = manifest
        self._bits = bits
        self._starts = np.concatenate([[0], np.cumsum([s.num_samples for s in manifest.shards], dtype=np.int64)])
        ranges = manifest.transcoded or []
        self._range_starts = [a for a, _ in ranges]
        self.count = manifest.transcoded_count

    @classmethod
    def load(cls, root: str | Path, manifest: Manifest) -> TranscodedRecords:
        """The transcoded records of the pack in ``root`` whose manifest is ``manifest``.

        Raises:
            ValueError: the manifest's counts contradict each other (one line, naming the field).
            FileNotFoundError: the side file the manifest names is missing.
            CorruptRecordError: the side file is outside the folder, not a regular file, of another size or
                CRC32C than the manifest's, or its bits do not add up to a shard's count; the message names it.
        """
        shards = manifest.shards
        if manifest.transcoded_records is None:
            return cls(manifest, None)
        where = "manifest.json"
        if manifest.transcoded is not None:
            raise ValueError(
                f"{where}: lists transcoded records both as ranges and as counts; re-create it with `fastdata pack`"
            )
        counts = [s.transcoded for s in shards if s.transcoded is not None]
        over = [s for s in shards if s.transcoded is not None and s.transcoded > s.num_samples]
        if over:
            raise ValueError(
                f"{where}: field transcoded of {over[0].path} is {over[0].transcoded}, more than its "
                f"{over[0].num_samples} records; re-create it with `fastdata pack`"
            )
        if len(counts) != len(shards) or sum(counts) != manifest.transcoded_records:
            raise ValueError(
                f"{where}: field transcoded_records is {manifest.transcoded_records} but its shards "
                "do not count as many; re-create it with `fastdata pack`"
            )
        partial = [k for k, s in enumerate(shards) if 0 < (s.transcoded or 0) < s.num_samples]
        if not partial:
            return cls(manifest, None)
        if manifest.transcoded_file is None or manifest.transcoded_nbytes is None or manifest.transcoded_crc32c is None:
            raise ValueError(
                f"{where}: {shards[partial[0]].path} is partly transcoded but the manifest names no "
                "transcoded_file with its size and CRC32C; re-create it with `fastdata pack`"
            )
        expected = (manifest.num_samples + 7) // 8
        path = resolve_inside(root, manifest.transcoded_file)
        if manifest.transcoded_nbytes != expected:
            raise CorruptRecordError(
                path, None, f"the manifest gives it {manifest.transcoded_nbytes} bytes, a bit per sample is {expected}"
            )
        data = read_regular(path, max_bytes=expected, nbytes=expected)
        check_crc32c(data, manifest.transcoded_crc32c, path)
        records = cls(manifest, np.frombuffer(data, np.uint8))
        for k in partial:
            mask = records.shard_mask(k)  # not None: the shard has a count and the bits are read
            found = 0 if mask is None else int(np.count_nonzero(mask))
            if found != shards[k].transcoded:
                raise CorruptRecordError(
                    path,
                    None,
                    f"marks {found} records of {shards[k].path} as transcoded, the "
                    f"manifest counts {shards[k].transcoded}",
                )
        return records

    def shard_mask(self, k: int) -> np.ndarray | None:
        """A bool per record of shard ``k``: re-coded or not (None: the manifest does not say)."""
        shard = self.manifest.shards[k]
        n, start = shard.num_samples, int(self._starts[k])
        if self.manifest.transcoded is not None:
            return self._from_ranges(start, start + n)
        if shard.transcoded is None:
            return None
        if shard.transcoded in (0, n) or self._bits is None:
            return np.full(n, shard.transcoded == n and n > 0)
        chunk = self._bits[start >> 3 : (start + n + 7) >> 3]
        return np.unpackbits(chunk, bitorder="little")[start & 7 : (start & 7) + n].astype(bool)

    def _from_ranges(self, start: int, stop: int) -> np.ndarray:
        mask = np.zeros(stop - start, bool)
        ranges = self.manifest.transcoded or []
        for a, b in ranges[max(0, bisect.bisect_right(self._range_starts, start) - 1) :]:
            if a >= stop:
                break
            if b > start:
                mask[max(a, start) - start : min(b, stop) - start] = True
        return mask

    def ranges(self) -> list[list[int]] | None:
        """Every re-coded sample as ``[start, stop)`` ranges (O(samples) time: for small packs and tests)."""
        masks = [m for m in (self.shard_mask(k) for k in range(len(self.manifest.shards))) if m is not None]
        if len(masks) != len(self.manifest.shards):
            return None
        flat = np.concatenate([m for m in masks if m is not None]) if masks else np.zeros(0, bool)
        edges = np.flatnonzero(np.diff(np.concatenate([[0], flat.astype(np.int8), [0]])))
        return [[int(a), int(b)] for a, b in zip(edges[::2], edges[1::2], strict=False)]
