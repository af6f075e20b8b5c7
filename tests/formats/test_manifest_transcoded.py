"""The manifest stays O(shards) whatever records pack re-codes: per-shard counts, and a checked bitmap side file
(``transcoded.bits``) only where a shard holds both kinds; manifests that list ``transcoded`` ranges still work."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.formats.errors import CorruptRecordError
from fastdata.formats.manifest import Manifest
from fastdata.formats.manifest_transcoded import TranscodedRecords
from fastdata.packing.check import describe, verify
from fastdata.packing.packer import pack
from tests.images import encode, natural_image
from tests.packs import edit_manifest, flip_bit


def _folder(root: Path, count: int, every: int) -> Path:
    """One class of ``count`` tiny images in pack order, every ``every``-th a PNG (which pack stores as it is)."""
    rng = np.random.default_rng(5)
    jpegs = [encode(natural_image(rng, 16, 16), "JPEG", quality=90) for _ in range(20)]
    png = encode(natural_image(rng, 16, 16), "PNG")
    (root / "a").mkdir(parents=True)
    for i in range(count):
        name = f"{i:06d}.png" if i % every == 0 else f"{i:06d}.jpg"
        (root / "a" / name).write_bytes(png if i % every == 0 else jpegs[i % len(jpegs)])
    return root


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_scattered_transcoded_records_keep_the_manifest_bytes_per_shard_bounded(tmp_path, fmt):
    """20,000 samples, every 10th not re-coded: 2,000 ranges (about 60 KB of JSON) before; now a count per shard and
    a 2,500-byte bitmap, so the manifest is a few hundred bytes per shard at any number of samples."""
    n = 20_000
    src = _folder(tmp_path / "src", n, 10)
    out = tmp_path / "out"
    manifest = pack(src, out, format=fmt, samples_per_shard=1000, progress=False)
    per_shard = (out / "manifest.json").stat().st_size / len(manifest.shards)
    assert len(manifest.shards) == 20 and per_shard < 500, per_shard
    assert "transcoded" not in json.loads((out / "manifest.json").read_text())  # no ranges
    assert manifest.transcoded_count == n - n // 10 and all(s.transcoded == 900 for s in manifest.shards)
    assert manifest.transcoded_file == "transcoded.bits" and (out / "transcoded.bits").stat().st_size == n // 8
    recoded = TranscodedRecords.load(out, manifest)
    for k in (0, 7, 19):
        expected = np.arange(k * 1000, (k + 1) * 1000) % 10 != 0
        np.testing.assert_array_equal(recoded.shard_mask(k), expected)
    assert verify(out, decode=False).ok


@pytest.fixture
def mixed(tmp_path) -> Path:
    """40 samples, 4 per shard, every 3rd a PNG: every shard partly re-coded."""
    out = tmp_path / "mixed"
    pack(_folder(tmp_path / "src", 40, 3), out, format="tfrecord", samples_per_shard=4, workers=0, progress=False)
    return out


def test_a_flipped_bit_in_the_side_file_is_damage_naming_it(mixed):
    manifest = Manifest.load(mixed)
    flip_bit(mixed / "transcoded.bits", 17)
    with pytest.raises(CorruptRecordError, match=r"transcoded\.bits.*CRC32C"):
        TranscodedRecords.load(mixed, manifest)
    problems = verify(mixed, decode=False).problems
    assert len(problems) == 1 and problems[0].startswith("transcoded.bits: CRC32C"), problems
    (mixed / "transcoded.bits").unlink()
    assert verify(mixed, decode=False).problems == ["transcoded.bits: missing"]


def test_side_file_bits_must_add_up_to_each_shards_count(mixed):
    """A side file rewritten with its checksum updated, but marking another record, disagrees with the counts."""
    from fastdata.formats.files import crc32c_hex

    data = bytearray((mixed / "transcoded.bits").read_bytes())
    data[0] ^= 0b1  # sample 0, a PNG, now claimed as re-coded
    (mixed / "transcoded.bits").write_bytes(bytes(data))
    edit_manifest(mixed, lambda m: m.update(transcoded_crc32c=crc32c_hex(bytes(data))))
    with pytest.raises(CorruptRecordError, match=r"marks 3 records of shard-00000\.tfrecord .* counts 2"):
        TranscodedRecords.load(mixed, Manifest.load(mixed))
    edit_manifest(mixed, lambda m: m["shards"][0].update(transcoded=5))  # more than its 4 records
    assert "more than its 4 records" in verify(mixed, decode=False).problems[0]


def _as_old_manifest(root: Path) -> list[list[int]]:
    """Rewrite ``root``'s manifest as fastdata wrote it before the counts: ``transcoded`` ranges, no side file."""
    ranges = TranscodedRecords.load(root, Manifest.load(root)).ranges()

    def old(m: dict) -> None:
        for key in ("transcoded_records", "transcoded_file", "transcoded_nbytes", "transcoded_crc32c"):
            m.pop(key, None)
        for shard in m["shards"]:
            shard.pop("transcoded")
        m["transcoded"] = ranges

    edit_manifest(root, old)
    (root / "transcoded.bits").unlink()
    return ranges


def test_an_old_manifest_with_ranges_opens_inspects_verifies_and_appends(mixed, tmp_path):
    src = tmp_path / "src"
    ranges = _as_old_manifest(mixed)
    assert len(ranges) > 10 and Manifest.load(mixed).transcoded_count == 26
    assert len(ShardDataset(mixed)) == 40
    assert "transcoded 26 of 40 records" in describe(mixed)
    assert verify(mixed).ok
    edit_manifest(mixed, lambda m: m.update(transcoded=[[0, 40]]))  # now claims the PNGs too
    assert len(verify(mixed, decode=False).problems) == 14
    edit_manifest(mixed, lambda m: m.update(transcoded=ranges))
    shutil.copytree(src, tmp_path / "more")
    both = pack(
        tmp_path / "more",
        mixed,
        format="tfrecord",
        samples_per_shard=4,
        workers=0,
        progress=False,
        append=True,
        allow_duplicates=True,
    )
    written = json.loads((mixed / "manifest.json").read_text())
    assert "transcoded" not in written and written["transcoded_records"] == 52  # the old ranges became counts
    assert both.transcoded_file == "transcoded-1.bits" and (mixed / "transcoded-1.bits").is_file()
    assert TranscodedRecords.load(mixed, both).ranges() == ranges + [[a + 40, b + 40] for a, b in ranges]
    assert verify(mixed).ok


def test_all_or_none_re_coded_writes_no_side_file(tmp_path):
    src = _folder(tmp_path / "src", 12, 100)  # sample 0 is the only PNG: alone in its shard
    (src / "a" / "000000.png").unlink()
    for keep_bytes in (False, True):
        out = tmp_path / f"out{keep_bytes}"
        manifest = pack(src, out, format="lmdb", samples_per_shard=4, workers=0, progress=False, keep_bytes=keep_bytes)
        assert manifest.transcoded_file is None and not list(out.glob("*.bits"))
        assert manifest.transcoded_count == (0 if keep_bytes else 11) and verify(out).ok
