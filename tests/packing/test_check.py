"""verify(): storage checks and image decoding in one pass over each shard."""

import numpy as np
import pytest

from fastdata.formats.example import ImageRecord
from fastdata.formats.manifest import Manifest
from fastdata.packing.check import verify
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


# --------------------------------------------------------------------------- labels, class table, sizes, index files


@pytest.fixture
def damaged(packed, tmp_path):
    """A private copy of a packed dataset (TFRecord and LMDB) to damage."""
    import shutil

    root = tmp_path / "ds"
    shutil.copytree(packed[0], root)
    return root


def verify_cli(capsys, root) -> tuple[int, str]:
    from fastdata.cli import main

    code = main(["verify", str(root)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_a_flipped_bit_in_targets_is_damage(damaged, capsys):
    from tests.packs import flip_bit

    data = (damaged / "targets.npy").read_bytes()
    flip_bit(damaged / "targets.npy", (len(data) - 8 * 9) * 8)  # the lowest bit of sample 4's label
    code, text = verify_cli(capsys, damaged)
    assert code == 1 and "DAMAGED targets.npy" in text


@pytest.mark.parametrize("checksummed", [True, False])
def test_targets_are_compared_with_the_labels_inside_the_records(damaged, capsys, checksummed):
    """A targets.npy rewritten whole (its checksum updated too, or from a manifest without one) is still caught."""
    from fastdata.formats.files import crc32c_hex
    from fastdata.formats.targets import encode_targets
    from tests.packs import edit_manifest

    labels = np.load(damaged / "targets.npy")
    labels[[4, 9]] = (labels[[4, 9]] + 1) % 3
    data = encode_targets(labels)
    (damaged / "targets.npy").write_bytes(data)
    if checksummed:
        edit_manifest(damaged, lambda m: m.update(targets_crc32c=crc32c_hex(data)))
    else:
        edit_manifest(damaged, lambda m: [m.pop(k) for k in ("targets_crc32c", "targets_nbytes")])
    code, text = verify_cli(capsys, damaged)
    assert code == 1
    assert "DAMAGED targets.npy: sample 4 has label" in text and "DAMAGED targets.npy: sample 9 has label" in text
    assert text.count("DAMAGED") == 2


def test_an_edited_class_name_is_damage(damaged, capsys):
    from tests.packs import edit_manifest

    edit_manifest(damaged, lambda m: m["classes"].__setitem__(1, "bea"))
    code, text = verify_cli(capsys, damaged)
    assert code == 1 and "class text is not 'bea'" in text and "class 1" in text


def test_a_wrong_nbytes_is_damage(damaged, capsys):
    from tests.packs import edit_manifest

    edit_manifest(damaged, lambda m: m["shards"][1].update(nbytes=m["shards"][1]["nbytes"] + 1))
    code, text = verify_cli(capsys, damaged)
    assert code == 1 and "DAMAGED shard-00001" in text and "the manifest says" in text


@pytest.mark.parametrize("packed", ["tfrecord"], indirect=True)
def test_a_missing_index_is_damage_not_a_usage_error(damaged, capsys):
    (damaged / "shard-00001.idx").unlink()
    code, text = verify_cli(capsys, damaged)
    assert code == 1 and "DAMAGED shard-00001.idx: missing" in text


def test_a_damaged_manifest_is_damage_in_one_line(damaged, capsys):
    text = (damaged / "manifest.json").read_text()
    (damaged / "manifest.json").write_text(text.replace('"nbytes": ', '"nbytes": -', 1))
    code, out = verify_cli(capsys, damaged)
    assert (
        code == 1 and out.count("DAMAGED") == 1 and "DAMAGED manifest.json:" in out and "field shards[0].nbytes" in out
    )
