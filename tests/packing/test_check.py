"""verify(): storage checks and image decoding in one pass over each shard."""

import numpy as np
import pytest

from fastdata.packing.check import verify
from fastdata.formats.example import ImageRecord
from fastdata.formats.manifest import Manifest
from fastdata.packing.writer import ShardWriter

from tests.images import encode, natural_image


def make_dataset(root, fmt):
    """Two records with sound storage checksums; the second one's bytes are not an image."""
    good = encode(natural_image(np.random.default_rng(0), 20, 30), "JPEG", quality=90)
    with ShardWriter(root, format=fmt) as writer:
        writer.write(ImageRecord(good, 0, "a", "a/good.jpg", "JPEG", 20, 30))
        writer.write(ImageRecord(b"\xff\xd8\xff not really a jpeg", 0, "a", "a/bad.jpg", "JPEG", 1, 1))
    np.save(root / "targets.npy", np.zeros(2, np.int64))
    Manifest(format=fmt, classes=["a"], shards=writer.shards).save(root)


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_undecodable_image_is_named_and_each_record_read_once(tmp_path, fmt, monkeypatch):
    make_dataset(tmp_path, fmt)
    import fastdata.packing.check as check_module

    seen = []
    real = check_module.get_decoder

    def counting_decoder(name):
        decoder = real(name)
        validate = decoder.validate
        decoder.validate = lambda data: (seen.append(data), validate(data))[1]
        return decoder

    monkeypatch.setattr(check_module, "get_decoder", counting_decoder)
    import fastdata.formats.tfrecord as tfrecord_module

    scans = []
    build_index = tfrecord_module.build_index
    monkeypatch.setattr(tfrecord_module, "build_index", lambda path: (scans.append(path), build_index(path))[1])
    report = verify(tmp_path)
    assert report.records == 2
    assert len(report.problems) == 1
    assert report.problems[0].startswith(f"shard-00000.{fmt}: record 1: image does not decode (corrupt JPEG")
    assert len(seen) == 2  # every record decoded once
    assert len(scans) == (1 if fmt == "tfrecord" else 0)  # the shard is scanned and read once, not again to decode
    assert verify(tmp_path, decode=False).ok
