"""TFRecord framing, Example payloads and index files, checked against bytes TensorFlow wrote."""

import os
from pathlib import Path

import numpy as np
import pytest

from fastdata._util.optional import has_dali
from fastdata.formats.base import CorruptRecordError
from fastdata.formats.example import ImageRecord, decode_example, encode_example
from fastdata.formats.tfrecord import TFRecordShardReader
from fastdata.formats.tfrecord_framing import build_index, frame, masked_crc32c, unframe
from fastdata.formats.tfrecord_index import read_index, write_index

DATA = Path(__file__).resolve().parents[1] / "data"
TF_FILE = DATA / "tf_written.tfrecord"


def tf_payloads():
    index = build_index(TF_FILE)
    reader = TFRecordShardReader(TF_FILE)
    try:
        return index, [reader.read_payload(o, s) for o, s in index.tolist()]
    finally:
        reader.close()


def test_reads_tensorflow_written_records():
    index, payloads = tf_payloads()
    assert len(index) == 3 and index[0, 0] == 0
    assert (index[1:, 0] == np.cumsum(index[:-1, 1])).all()
    for k, payload in enumerate(payloads):
        record = decode_example(payload)
        assert record.image == (DATA / f"tf_written_{k}.jpg").read_bytes()
        assert record.label == k + 1  # TensorFlow's 1-based labels
        assert decode_example(payload, label_offset=-1).label == k
        assert record.class_name == f"class{k}" and record.filename == f"img{k}.JPEG" and record.image_format == "JPEG"


def test_framing_is_byte_identical_to_tensorflow():
    _, payloads = tf_payloads()
    ours = b"".join(h + p + f for p in payloads for h, f in [frame(p)])
    assert ours == TF_FILE.read_bytes()


def test_masked_crc_known_value():
    # TensorFlow frames a record of length 0 with this header; derived from TF's own masking formula.
    assert masked_crc32c(b"") == ((0 >> 15 | (0 << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    assert masked_crc32c(b"123456789") == (((0xE3069283 >> 15) | (0xE3069283 << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_example_roundtrip_has_tensorflow_keys():
    record = ImageRecord(b"\xff\xd8\xffdata", 7, "zebra", "zebra/1.jpg", "JPEG", 10, 20)
    payload = encode_example(record)
    assert decode_example(payload) == record
    assert encode_example(record) == payload  # deterministic
    for key in [
        b"image/encoded",
        b"image/class/label",
        b"image/class/text",
        b"image/filename",
        b"image/format",
        b"image/height",
        b"image/width",
    ]:
        assert key in payload


def test_index_file_format(tmp_path):
    index = build_index(TF_FILE)
    path = tmp_path / "x.idx"
    write_index(path, index)
    lines = path.read_text().splitlines()
    assert lines == [f"{o} {s}" for o, s in index.tolist()]  # DALI tfrecord2idx: "offset size" per record
    assert np.array_equal(read_index(path), index)


def test_flipped_byte_is_caught_with_shard_and_offset(tmp_path):
    data = bytearray(TF_FILE.read_bytes())
    index = build_index(TF_FILE)
    offset, size = index[1].tolist()
    data[offset + 40] ^= 0x01
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes(bytes(data))
    reader = TFRecordShardReader(bad)
    with pytest.raises(CorruptRecordError, match="data CRC mismatch") as info:
        reader.read(offset, size)
    assert info.value.offset == offset and info.value.shard == str(bad)
    reader.read(*index[0].tolist())  # neighbours still read


def test_truncated_file_is_reported(tmp_path):
    bad = tmp_path / "cut.tfrecord"
    bad.write_bytes(TF_FILE.read_bytes()[:-5])
    with pytest.raises(CorruptRecordError, match="truncated"):
        build_index(bad)


def test_unframe_rejects_wrong_size():
    header, footer = frame(b"abc")
    with pytest.raises(CorruptRecordError, match="length"):
        unframe(header + b"abcd" + footer)


@pytest.mark.dali
@pytest.mark.parametrize("packed", ["tfrecord"], indirect=True)
@pytest.mark.skipif(not has_dali(), reason="nvidia-dali is not installed (the `dali` extra)")
def test_dali_reads_our_shards_with_our_index(packed):
    from nvidia.dali import fn, pipeline_def, tfrecord

    root, info = packed
    from fastdata.formats.manifest import Manifest

    manifest = Manifest.load(root)

    @pipeline_def(batch_size=4, num_threads=1, device_id=None)
    def pipe():
        inputs = fn.readers.tfrecord(
            path=[str(root / s.path) for s in manifest.shards],
            index_path=[str(root / s.index) for s in manifest.shards],
            features={
                "image/encoded": tfrecord.FixedLenFeature((), tfrecord.string, ""),
                "image/class/label": tfrecord.FixedLenFeature([1], tfrecord.int64, -1),
            },
            random_shuffle=False,
            name="reader",
        )
        return inputs["image/encoded"], inputs["image/class/label"]

    p = pipe()
    p.build()
    seen = []
    while len(seen) < manifest.num_samples:
        encoded, labels = p.run()
        for k in range(len(encoded)):
            seen.append((np.array(encoded.at(k)).tobytes(), int(np.array(labels.at(k))[0])))
    seen = seen[: manifest.num_samples]
    from fastdata.datasets.shard_dataset import ShardDataset

    ds = ShardDataset(root)
    assert seen == [ds.read(i) for i in range(len(info.good))]


def test_a_reader_that_cannot_open_its_shard_leaves_no_error_behind(tmp_path, monkeypatch):
    import gc
    import sys

    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)  # where __del__'s exceptions would go
    with pytest.raises(FileNotFoundError):
        TFRecordShardReader(tmp_path / "missing.tfrecord")
    os.mkfifo(tmp_path / "fifo.tfrecord")
    with pytest.raises(CorruptRecordError, match="not a regular file"):  # and never blocks on a FIFO
        TFRecordShardReader(tmp_path / "fifo.tfrecord")
    gc.collect()
    assert unraisable == []
