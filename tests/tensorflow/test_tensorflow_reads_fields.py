"""TensorFlow itself reads fastdata's TFRecords: every field by name with ``tf.io.parse_single_example``, and the image.

TensorFlow runs in a subprocess (its import starts thread pools and oneDNN; the pytest process stays torch-only).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
from PIL import Image

from fastdata.packing.packer import pack
from tests.packing.sources_data import make_samples, write_jsonl

ROOT = Path(__file__).resolve().parents[2]

READER = textwrap.dedent("""
    import json, sys
    import tensorflow as tf

    paths = json.loads(sys.argv[1])
    features = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "score": tf.io.FixedLenFeature([], tf.float32),
        "count": tf.io.FixedLenFeature([], tf.int64),
        "caption": tf.io.FixedLenFeature([], tf.string),
        "tags": tf.io.VarLenFeature(tf.int64),
        "boxes": tf.io.VarLenFeature(tf.float32),
        "center": tf.io.FixedLenFeature([2], tf.float32),
        "extra": tf.io.FixedLenFeature([], tf.string),
    }
    out = []
    for raw in tf.data.TFRecordDataset(paths):
        ex = tf.io.parse_single_example(raw, features)
        image = tf.io.decode_jpeg(ex["image/encoded"], channels=3)
        out.append({
            "shape": [int(d) for d in image.shape], "label": int(ex["image/class/label"]),
            "score": float(ex["score"]), "count": int(ex["count"]), "caption": ex["caption"].numpy().decode(),
            "tags": tf.sparse.to_dense(ex["tags"]).numpy().tolist(),
            "boxes": tf.sparse.to_dense(ex["boxes"]).numpy().tolist(),
            "center": ex["center"].numpy().tolist(), "extra": json.loads(ex["extra"].numpy().decode()),
        })
    print(json.dumps(out))
""")


def test_tensorflow_parses_every_field_by_name(tmp_path):
    samples = make_samples(12)
    out = tmp_path / "out"
    manifest = pack(
        write_jsonl(tmp_path / "src", samples),
        out,
        format="tfrecord",
        fields="score,count,caption,tags,boxes,center,extra",
        samples_per_shard=5,
        workers=0,
        progress=False,
    )
    assert len(manifest.shards) == 3  # records are read across shard boundaries, in manifest order
    paths = [str(out / s.path) for s in manifest.shards]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", READER, json.dumps(paths)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(rows) == len(samples)
    for row, (data, label, fields) in zip(rows, samples, strict=False):
        assert row["label"] == label
        assert (
            row["count"] == fields["count"] and row["caption"] == fields["caption"] and row["extra"] == fields["extra"]
        )
        assert row["tags"] == fields["tags"]
        np.testing.assert_array_equal(np.float32(row["score"]), np.float32(fields["score"]))
        np.testing.assert_array_equal(np.float32(row["boxes"]), np.float32(fields["boxes"]))
        np.testing.assert_array_equal(np.float32(row["center"]), np.float32(fields["center"]))
        assert row["shape"] == [*Image.open(io.BytesIO(data)).size[::-1], 3]
