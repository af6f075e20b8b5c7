"""DALI's CPU TFRecord reader reads the fields fastdata packs, by name, from our shards and index files."""

from __future__ import annotations

import numpy as np
import pytest

from fastdata._util.optional import has_dali
from fastdata.packing.packer import pack
from tests.packing.sources_data import make_samples, write_jsonl

requires_dali = pytest.mark.skipif(not has_dali(), reason="nvidia-dali is not installed (the `dali` extra)")


@requires_dali
def test_dali_cpu_tfrecord_reader_reads_fields_by_name(tmp_path):
    import nvidia.dali.tfrecord as tfrec
    from nvidia.dali import fn, pipeline_def

    samples = make_samples(8)
    out = tmp_path / "out"
    manifest = pack(
        write_jsonl(tmp_path / "src", samples),
        out,
        format="tfrecord",
        fields="tags,center,count",
        workers=0,
        progress=False,
    )
    shard = manifest.shards[0]

    @pipeline_def(batch_size=len(samples), num_threads=1, device_id=None)
    def pipe():
        features = {
            "tags": tfrec.VarLenFeature(tfrec.int64, 0),
            "center": tfrec.FixedLenFeature([2], tfrec.float32, 0.0),
            "count": tfrec.FixedLenFeature([1], tfrec.int64, -1),
            "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
        }
        r = fn.readers.tfrecord(
            path=[str(out / shard.path)], index_path=[str(out / shard.index)], features=features, random_shuffle=False
        )
        return r["tags"], r["center"], r["count"], r["image/class/label"]

    p = pipe()
    p.build()
    tags, center, count, label = p.run()
    for i, (_, lab, fields) in enumerate(samples):
        assert tags.at(i).tolist() == fields["tags"]
        np.testing.assert_allclose(center.at(i), np.float32(fields["center"]))
        assert count.at(i).tolist() == [fields["count"]] and label.at(i).tolist() == [lab]
