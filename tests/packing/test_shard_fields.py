"""Fields carried when the source is existing shards: a fastdata pack converted to the other format, and
third-party TFRecords whose extra features ``--fields`` names."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.formats.example import Example, ImageRecord, encode_example
from fastdata.formats.manifest import Manifest
from fastdata.formats.tfrecord_framing import frame
from fastdata.packing.packer import pack
from tests.packing.sources_data import make_samples, write_jsonl

FIELDS = ("score", "count", "caption", "tags", "boxes", "center", "extra")
OPTS = dict(workers=0, progress=False, keep_bytes=True)


def _values(ds: ShardDataset) -> list:
    """Every sample's (image bytes, label, fields) with arrays as lists, in order."""
    out = []
    for i in range(len(ds)):
        data, label = ds.read(i)
        fields = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in ds.read_fields(i).items()}
        out.append((data, label, fields))
    return out


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """A JSONL list with every field type packed into each format."""
    root = tmp_path_factory.mktemp("shard-fields")
    src = write_jsonl(root / "list", make_samples(18))
    packs = {}
    for fmt in ("tfrecord", "lmdb"):
        packs[fmt] = root / f"pack-{fmt}"
        pack(src, packs[fmt], format=fmt, fields=FIELDS, samples_per_shard=5, **OPTS)
    return packs


@pytest.mark.parametrize("src_fmt,dst_fmt", [("lmdb", "tfrecord"), ("tfrecord", "lmdb"), ("lmdb", "lmdb")])
def test_a_pack_converted_keeps_every_field_with_its_type(packed, src_fmt, dst_fmt, tmp_path):
    manifest = pack(packed[src_fmt], tmp_path / "out", format=dst_fmt, samples_per_shard=4, **OPTS)
    before = Manifest.load(packed[src_fmt])
    assert manifest.options["field_types"] == before.options["field_types"]
    source = ShardDataset(packed[src_fmt], fields=FIELDS)
    converted = ShardDataset(tmp_path / "out", fields=FIELDS)
    assert len(converted) == len(source) == 18
    assert _values(converted) == _values(source)


def test_a_pack_converted_with_fields_named_keeps_only_those(packed, tmp_path):
    manifest = pack(packed["lmdb"], tmp_path / "out", format="tfrecord", fields=("boxes", "caption"), **OPTS)
    assert sorted(manifest.options["field_types"]) == ["boxes", "caption"]
    a = ShardDataset(packed["lmdb"], fields=("boxes", "caption"))
    b = ShardDataset(tmp_path / "out", fields=("boxes", "caption"))
    assert _values(a) == _values(b)


def test_a_field_the_pack_does_not_hold_is_refused_in_one_line(packed, tmp_path):
    with pytest.raises(ValueError, match="no field 'nope'") as info:
        pack(packed["lmdb"], tmp_path / "out", format="tfrecord", fields=("nope",), **OPTS)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out" / "manifest.json").exists()


def _third_party(path, samples, *, by_hand: bool, first: int = 0) -> None:
    """TFRecords as another tool writes them: the image features, and extra ones of every list kind."""
    with open(path, "wb") as f:
        for k, (data, label, fields) in enumerate(samples):
            extra = {
                "image/object/bbox": ("float", fields["boxes"]),
                "ids": ("int64", fields["tags"]),
                "score": ("float", [fields["score"]]),
                "caption": ("bytes", [fields["caption"].encode()]),
                "year": ("int64", [2000 + first + k]),
            }
            if by_hand:  # protobuf directly, feature by feature
                example = Example()
                feature = example.features.feature
                feature["image/encoded"].bytes_list.value.append(data)
                feature["image/class/label"].int64_list.value.append(label)
                for name, (kind, values) in extra.items():
                    getattr(feature[name], f"{kind}_list").value.extend(values)
                payload = example.SerializeToString()
            else:
                payload = encode_example(ImageRecord(data, label, fields=extra))
            head, foot = frame(payload)
            f.write(head + payload + foot)


@pytest.mark.parametrize("by_hand", [False, True], ids=["our-writer", "protobuf"])
@pytest.mark.parametrize("fmt", ["lmdb", "tfrecord"])
def test_third_party_tfrecord_features_become_typed_fields(by_hand, fmt, tmp_path):
    samples = make_samples(12)
    _third_party(tmp_path / "a.tfrecord", samples[:7], by_hand=by_hand)
    _third_party(tmp_path / "b.tfrecord", samples[7:], by_hand=by_hand, first=7)
    names = ("image/object/bbox", "ids", "score", "caption", "year")
    with pytest.raises(ValueError, match="reserved|image's own"):
        pack(tmp_path / "a.tfrecord", tmp_path / "bad", format=fmt, fields=names, **OPTS)
    names = ("ids", "score", "caption", "year")
    manifest = pack(str(tmp_path / "*.tfrecord"), tmp_path / "out", format=fmt, fields=names, **OPTS)
    types = manifest.options["field_types"]
    assert types == {
        "ids": {"kind": "int_list", "shape": [-1]},
        "score": {"kind": "float", "shape": []},
        "caption": {"kind": "string", "shape": []},
        "year": {"kind": "int", "shape": []},
    }
    ds = ShardDataset(tmp_path / "out", fields=names)
    assert len(ds) == 12
    for k, (data, label, fields) in enumerate(samples):
        image, got_label = ds.read(k)
        got = ds.read_fields(k)
        assert (image, got_label) == (data, label)
        assert got["ids"].tolist() == fields["tags"]
        assert got["score"] == pytest.approx(np.float32(fields["score"]))
        assert got["caption"] == fields["caption"]
        assert got["year"] == 2000 + k
    again = pack(str(tmp_path / "*.tfrecord"), tmp_path / "out2", format=fmt, fields=names, **OPTS)
    assert [s.crc32c for s in again.shards] == [s.crc32c for s in manifest.shards]


def test_a_record_without_a_named_feature_is_a_bad_row_and_an_unknown_one_is_refused(tmp_path):
    samples = make_samples(6)
    _third_party(tmp_path / "a.tfrecord", samples[:5], by_hand=True)
    with open(tmp_path / "a.tfrecord", "ab") as f:  # a record without the extra features
        example = Example()
        example.features.feature["image/encoded"].bytes_list.value.append(samples[5][0])
        example.features.feature["image/class/label"].int64_list.value.append(0)
        payload = example.SerializeToString()
        head, foot = frame(payload)
        f.write(head + payload + foot)
    manifest = pack(tmp_path / "a.tfrecord", tmp_path / "out", format="lmdb", fields=("year",), **OPTS)
    assert manifest.num_samples == 5
    assert [s.reason for s in manifest.skipped] == ["the record has no feature 'year' (named by --fields)"]
    assert "(record 6)" in manifest.skipped[0].path
    with pytest.raises(ValueError, match="no record .* has the feature 'nope'") as info:
        pack(tmp_path / "a.tfrecord", tmp_path / "out2", format="lmdb", fields=("nope",), **OPTS)
    assert "\n" not in str(info.value)
    from fastdata.packing.pipeline import BadImageError

    with pytest.raises(BadImageError, match="year"):
        pack(tmp_path / "a.tfrecord", tmp_path / "out3", format="lmdb", fields=("year",), strict=True, **OPTS)
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["num_samples"] == 5


def test_inspect_shows_each_field_with_its_type(packed, capsys):
    from fastdata.cli import main

    assert main(["inspect", str(packed["lmdb"])]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("fields"))
    assert lines[start] == f"fields    {len(FIELDS)}"
    table = {line.split()[0]: line.split(None, 3)[1:] for line in lines[start + 2 : start + 2 + len(FIELDS)]}
    types = Manifest.load(packed["lmdb"]).options["field_types"]
    assert sorted(table) == sorted(FIELDS)
    for name, (kind, shape, _rest) in table.items():
        assert kind == types[name]["kind"]
        dims = types[name]["shape"]
        assert shape == ("scalar" if not dims else "[" + ", ".join("n" if d == -1 else str(d) for d in dims) + "]")
    assert table["boxes"][2].endswith("list of tensors (pad_fields: padded + mask)")
    assert table["center"][2].endswith("tensor [N, 2]") and table["caption"][2].endswith("list")
    assert "field_types" not in text
