"""Fields per sample: types inferred, stored as Example features (and in LMDB records), read back by name, collated."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.formats.example import parse_features
from fastdata.formats.fields import infer_types
from fastdata.formats.tfrecord import TFRecordShardReader
from fastdata.formats.tfrecord_index import read_index
from fastdata.loader.collate import fast_collate
from fastdata.packing.packer import pack
from tests.packing.sources_data import make_samples, write_csv, write_jsonl, write_webdataset

FIELDS = ("score", "count", "caption", "tags", "boxes", "center", "extra")
KINDS = {
    "score": ("float", []),
    "count": ("int", []),
    "caption": ("string", []),
    "tags": ("int_list", [-1]),
    "boxes": ("float_array", [-1]),
    "center": ("float_array", [2]),
    "extra": ("json", []),
}


@pytest.fixture(scope="module")
def samples():
    return make_samples()


@pytest.fixture(scope="module", params=["tfrecord", "lmdb"])
def packed(request, samples, tmp_path_factory):
    root = tmp_path_factory.mktemp("fields")
    src = write_jsonl(root / "src", samples)
    out = root / "out"
    manifest = pack(
        src, out, format=request.param, fields=",".join(FIELDS), samples_per_shard=5, workers=0, progress=False
    )
    return out, manifest


def expected(value):
    if isinstance(value, float):
        return float(np.float32(value))
    if isinstance(value, list) and value and isinstance(value[0], float):
        return np.asarray(value, dtype=np.float32)
    if isinstance(value, list) and value and isinstance(value[0], int):
        return np.asarray(value, dtype=np.int64)
    return value


def test_types_are_inferred_and_recorded_in_the_manifest(packed):
    _, manifest = packed
    types = manifest.options["field_types"]
    assert {name: (t["kind"], t["shape"]) for name, t in types.items()} == KINDS


def test_the_dataset_returns_every_field_type_equal(packed, samples):
    out, _ = packed
    ds = ShardDataset(out, fields=list(FIELDS))
    assert len(ds) == len(samples)
    for i, (_data, label, fields) in enumerate(samples):
        image, got_label, got = ds[i]
        assert got_label == label and image.ndim == 3
        assert set(got) == set(FIELDS)
        for name in FIELDS:
            want = expected(fields[name])
            if isinstance(want, np.ndarray) or isinstance(got[name], np.ndarray):
                np.testing.assert_array_equal(got[name], np.asarray(want).reshape(got[name].shape))
                assert got[name].dtype == (np.int64 if name == "tags" else np.float32)
            else:
                assert got[name] == want, name
    only = ShardDataset(out, fields=["boxes"])
    assert set(only[0][2]) == {"boxes"}
    assert len(ShardDataset(out)[0]) == 2  # without fields=: (image, label) as before


def test_a_field_the_pack_lacks_is_refused_naming_those_it_has(packed):
    out, _ = packed
    with pytest.raises(ValueError, match="no field 'nope'.*boxes, caption"):
        ShardDataset(out, fields=["nope"])


@pytest.fixture(scope="module")
def tfrecord_pack(samples, tmp_path_factory):
    root = tmp_path_factory.mktemp("tf-fields")
    out = root / "out"
    manifest = pack(
        write_jsonl(root / "src", samples),
        out,
        format="tfrecord",
        fields=",".join(FIELDS),
        samples_per_shard=5,
        workers=0,
        progress=False,
        keep_bytes=True,
    )
    return out, manifest


def test_tfrecord_features_are_readable_by_name_with_the_example_parser(tfrecord_pack, samples):
    out, manifest = tfrecord_pack
    shard = manifest.shards[0]
    reader = TFRecordShardReader(out / shard.path)
    offset, size = read_index(out / shard.index)[1]
    feature = parse_features(reader.read_payload(int(offset), int(size)))
    reader.close()
    fields = samples[1][2]
    assert list(feature["tags"].int64_list.value) == fields["tags"]
    assert feature["caption"].bytes_list.value[0].decode() == fields["caption"]
    np.testing.assert_allclose(feature["center"].float_list.value, fields["center"])
    assert feature["image/encoded"].bytes_list.value[0] == samples[1][0]


def test_fast_collate_stacks_fixed_fields_and_lists_or_pads_variable_ones(packed):
    out, _ = packed
    ds = ShardDataset(out, fields=list(FIELDS))
    batch = [ds[i] for i in range(6)]
    batch = [(np.ascontiguousarray(img[:16, :16]), label, f) for img, label, f in batch]
    images, labels, fields = fast_collate(batch)
    assert images.shape == (6, 3, 16, 16) and labels.dtype == torch.int64
    assert fields["center"].shape == (6, 2) and fields["center"].dtype == torch.float32
    assert fields["count"].dtype == torch.int64 and fields["score"].dtype == torch.float32
    assert isinstance(fields["tags"], list) and isinstance(fields["caption"], list)
    _, _, padded = fast_collate(batch, pad_fields=True)
    lengths = [len(f["tags"]) for _, _, f in batch]
    assert padded["tags"].shape == (6, max(lengths)) and padded["tags_mask"].sum(1).tolist() == lengths
    for i, (_, _, f) in enumerate(batch):
        assert padded["tags"][i, : lengths[i]].tolist() == f["tags"].tolist()


def test_csv_fields_are_typed_from_their_text(samples, tmp_path):
    src = write_csv(tmp_path / "src", samples)
    out = tmp_path / "out"
    manifest = pack(src, out, format="lmdb", fields="caption,count", workers=0, progress=False)
    assert manifest.options["field_types"] == {
        "caption": {"kind": "string", "shape": []},
        "count": {"kind": "int", "shape": []},
    }
    ds = ShardDataset(out, fields=["caption", "count"])
    assert [ds[i][2] for i in range(3)] == [{"caption": f["caption"], "count": f["count"]} for _, _, f in samples[:3]]


def test_webdataset_json_keys_are_fields(samples, tmp_path):
    out = tmp_path / "out"
    pack(
        write_webdataset(tmp_path / "wds", samples),
        out,
        format="tfrecord",
        fields="tags,extra",
        workers=0,
        progress=False,
    )
    ds = ShardDataset(out, fields=["tags", "extra"])
    assert ds[5][2]["extra"] == samples[5][2]["extra"] and ds[5][2]["tags"].tolist() == samples[5][2]["tags"]


def test_type_inference_joins_values():
    rows = [{"a": 1, "b": [1, 2], "c": [[0.5, 1], [2, 3]], "d": "x"}, {"a": 2.5, "b": [], "c": [], "d": None}]
    assert infer_types("abcd", rows) == {
        "a": {"kind": "float", "shape": []},
        "b": {"kind": "int_list", "shape": [-1]},
        "c": {"kind": "float_array", "shape": [-1, 2]},
        "d": {"kind": "json", "shape": []},
    }
    with pytest.raises(ValueError, match="reserved"):
        infer_types(["image/encoded"], rows)
