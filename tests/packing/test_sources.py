"""Every source kind packs the same images, in a deterministic order, into both formats, and reads back equal."""

from __future__ import annotations

import pytest

from fastdata.packing.packer import pack
from fastdata.packing.sources import source_kind
from fastdata.packing.sources.webdataset import expand_braces
from tests.packing.sources_data import (
    CLASSES,
    imagefolder_order,
    make_samples,
    read_back,
    shard_bytes,
    write_csv,
    write_hf_parquet,
    write_image_folder,
    write_jsonl,
    write_webdataset,
)

FORMATS = ("tfrecord", "lmdb")


@pytest.fixture(scope="module")
def samples():
    return make_samples()


@pytest.fixture(scope="module")
def sources(samples, tmp_path_factory):
    """SRC of every kind, and the (image bytes, label) each must pack to, in order."""
    root = tmp_path_factory.mktemp("sources")
    listed = [(d, label) for d, label, _ in samples]
    folder = write_image_folder(root / "folder", samples)
    by_folder = [listed[k] for k in imagefolder_order(samples)]
    packs = {fmt: root / f"pack-{fmt}" for fmt in FORMATS}
    for fmt, out in packs.items():
        pack(folder, out, format=fmt, samples_per_shard=7, workers=0, progress=False, keep_bytes=True)
    return {
        "imagefolder": (str(folder), by_folder, list(CLASSES)),
        "csv": (str(write_csv(root / "csv", samples)), listed, list(CLASSES)),
        "jsonl": (str(write_jsonl(root / "jsonl", samples)), listed, ["0", "1", "2"]),
        "parquet": (str(write_hf_parquet(root / "hf", samples)), listed, list(CLASSES)),
        "webdataset": (write_webdataset(root / "wds", samples), listed, ["0", "1", "2"]),
        "pack": (str(packs["lmdb"]), by_folder, list(CLASSES)),
        "tfrecord": (str(packs["tfrecord"] / "*.tfrecord"), by_folder, ["0", "1", "2"]),
    }


KINDS = ("imagefolder", "csv", "jsonl", "parquet", "webdataset", "pack", "tfrecord")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", KINDS)
def test_each_source_packs_and_reads_back_equal(kind, fmt, sources, tmp_path):
    src, expected, classes = sources[kind]
    manifest = pack(src, tmp_path / "a", format=fmt, samples_per_shard=5, workers=0, progress=False, keep_bytes=True)
    got_manifest, records = read_back(tmp_path / "a")
    assert manifest.classes == classes and got_manifest.classes == classes
    assert [(image, label) for image, label, _ in records] == expected  # the source's bytes, labels, order
    assert [text for _, _, text in records] == [classes[label] for _, label in expected]
    assert not manifest.skipped
    again = pack(src, tmp_path / "b", format=fmt, samples_per_shard=5, workers=2, progress=False, keep_bytes=True)
    assert again.to_dict() == manifest.to_dict()
    assert shard_bytes(tmp_path / "b") == shard_bytes(tmp_path / "a")  # byte-identical, with or without workers


@pytest.mark.parametrize("kind", KINDS)
def test_the_source_kind_is_told_by_what_src_is(kind, sources):
    expected = {"csv": "list", "jsonl": "list"}.get(kind, kind)
    assert source_kind(sources[kind][0]) == expected


def test_a_shuffled_pack_of_a_list_is_a_permutation_and_deterministic(sources, tmp_path):
    src, expected, _ = sources["csv"]
    pack(src, tmp_path / "a", format="lmdb", shuffle_seed=7, workers=0, progress=False, keep_bytes=True)
    pack(src, tmp_path / "b", format="lmdb", shuffle_seed=7, workers=0, progress=False, keep_bytes=True)
    _, records = read_back(tmp_path / "a")
    assert sorted((i, label) for i, label, _ in records) == sorted(expected)
    assert [(i, label) for i, label, _ in records] != expected
    assert shard_bytes(tmp_path / "a") == shard_bytes(tmp_path / "b")


def test_a_list_with_integer_labels_in_text_keeps_them(samples, tmp_path):
    (tmp_path / "a.jpg").write_bytes(samples[0][0])
    (tmp_path / "b.jpg").write_bytes(samples[1][0])
    (tmp_path / "list.csv").write_text("filename,y\na.jpg,4\nb.jpg,2\n")
    manifest = pack(
        tmp_path / "list.csv", tmp_path / "out", format="tfrecord", label_column="y", workers=0, progress=False
    )
    assert manifest.classes == ["0", "1", "2", "3", "4"]
    assert [label for _, label, _ in read_back(tmp_path / "out")[1]] == [4, 2]


def test_brace_expansion_as_webdataset_writes_it():
    assert expand_braces("s-{000008..000011}.tar") == ["s-000008.tar", "s-000009.tar", "s-000010.tar", "s-000011.tar"]
    assert expand_braces("{a,b}/x-{1..2}.tar") == ["a/x-1.tar", "a/x-2.tar", "b/x-1.tar", "b/x-2.tar"]
    assert expand_braces("plain.tar") == ["plain.tar"]


@pytest.mark.parametrize("kind", ["csv", "webdataset", "parquet"])
def test_an_interrupted_pack_of_a_source_resumes_byte_identical(kind, sources, tmp_path, monkeypatch):
    import fastdata.packing.pipeline as pipeline

    src = sources[kind][0]
    pack(src, tmp_path / "whole", format="lmdb", samples_per_shard=4, workers=0, progress=False)
    real, calls = pipeline._load, []

    def load(job):
        calls.append(job)
        if len(calls) > 10:
            raise KeyboardInterrupt
        return real(job)

    monkeypatch.setattr(pipeline, "_load", load)
    with pytest.raises(KeyboardInterrupt):
        pack(src, tmp_path / "out", format="lmdb", samples_per_shard=4, workers=0, progress=False)
    monkeypatch.setattr(pipeline, "_load", real)
    pack(src, tmp_path / "out", format="lmdb", samples_per_shard=4, workers=0, progress=False, resume=True)
    assert shard_bytes(tmp_path / "out") == shard_bytes(tmp_path / "whole")
