"""Round four: ``fastdata.write`` with hostile iterables. A bad sample, a raising iterable or Ctrl-C ends in one line
(the user's own exception as it is) and leaves nothing of the call; what can be stored (numpy's scalars and arrays)
is stored; a rerun after Ctrl-C writes the uninterrupted run's bytes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import fastdata
from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.packing.write import write
from tests.images import encode, natural_image
from tests.packing.slow_pack import all_files, terminal_signals

OPTS = dict(samples_per_shard=3, workers=0, progress=False)


@pytest.fixture(scope="module")
def jpegs() -> list[bytes]:
    rng = np.random.default_rng(3)
    return [encode(natural_image(rng, 20 + k % 5, 28), "JPEG", quality=90) for k in range(10)]


def _refused(samples, out: Path, error, match: str, **options) -> None:
    with pytest.raises(error, match=match) as info:
        write(samples, out, **{**OPTS, **options})
    assert "\n" not in str(info.value)
    assert not out.exists() or not any(out.iterdir())  # nothing of the call is left


def test_an_iterable_raising_mid_way_leaves_nothing_and_its_error_as_is(jpegs, tmp_path):
    def samples():
        for k, data in enumerate(jpegs):
            if k == 7:
                raise RuntimeError("the user's own failure")
            yield data, k % 2

    _refused(samples(), tmp_path / "out", RuntimeError, "the user's own failure")


def _ok(jpegs):
    return [(data, 0) for data in jpegs[:3]]


@pytest.mark.parametrize(
    "last, error, match, fields",
    [
        (lambda j: None, TypeError, "sample 3 must be", None),
        (lambda j: b"just bytes", TypeError, "sample 3 must be", None),
        (lambda j: (None, 0), TypeError, "sample 3: the image must be the encoded file's bytes", None),
        (lambda j: ("text", 0), TypeError, "sample 3: the image must be the encoded file's bytes", None),
        (lambda j: (j[3], None), TypeError, "sample 3: label must be an int", None),
        (lambda j: (j[3], np.float64(1.0)), TypeError, "sample 3: label must be an int", None),
        (lambda j: (j[3], True), TypeError, "sample 3: label must be an int", None),
        (lambda j: (j[3], -1), ValueError, "sample 3: label -1 is outside the labels", None),
        (lambda j: (j[3], 2**70), ValueError, "sample 3: label .* is larger than 16777215", None),
        (lambda j: (j[3], 2**40), ValueError, "sample 3: label .* is larger than 16777215", None),
        (lambda j: (j[3], 0, {1: 2}), TypeError, "sample 3: field names must be str", None),
        (lambda j: (j[3], 0, {"f": {1, 2}}), TypeError, "sample 3: a field value cannot be stored as JSON", "json"),
        (lambda j: (j[3], 0, {"f": "x\udcff"}), ValueError, "sample 3: its fields: a string holds a lone", "string"),
        (lambda j: (j[3], 0, [1]), TypeError, "sample 3: fields must be a dict", None),
    ],
    ids=[
        "none",
        "bytes",
        "none-image",
        "str-image",
        "none-label",
        "np-float-label",
        "bool-label",
        "negative",
        "label-2**70",
        "label-2**40",
        "int-field-name",
        "set-in-json",
        "surrogate-field",
        "list-fields",
    ],
)
def test_a_bad_sample_is_one_line_naming_it(jpegs, tmp_path, last, error, match, fields):
    """Round four found: 2**70 raised protobuf's bare `Value out of range`; 2**40 built 2**40 class names (a hang);
    an int field name an AttributeError; a lone surrogate a bare UnicodeEncodeError."""
    sample = last(jpegs)
    if fields is not None:
        head = [(data, 0, {"f": "ok" if fields == "string" else [1]}) for data in jpegs[:3]]
        _refused([*head, sample], tmp_path / "out", error, match, fields={"f": fields})
    else:
        _refused([*_ok(jpegs), sample], tmp_path / "out", error, match)


def test_classes_with_a_lone_surrogate_are_refused(jpegs, tmp_path):
    _refused(
        [(jpegs[0], 0)],
        tmp_path / "out",
        ValueError,
        "classes: a string holds a lone surrogate",
        classes=["a\udcff", "b"],
    )


def test_numpy_scalars_and_arrays_are_stored_as_the_numbers_they_hold(jpegs, tmp_path):
    """Round four found: a numpy value in a field (np.float32, np.int64, an array, one inside a json field) failed
    with `Object of type float32 is not JSON serializable`."""
    samples = [
        (
            np.frombuffer(data, np.uint8).tobytes(),
            np.int64(k % 2),
            {
                "x": np.float32(k + 0.5),
                "n": np.int32(k),
                "v": np.arange(3) + k,
                "b": np.bool_(k % 2),
                "j": {"a": np.int64(k), "l": [np.float64(1.5)]},
            },
        )
        for k, data in enumerate(jpegs)
    ]
    write(samples, tmp_path / "np", **OPTS)
    plain = [
        (data, k % 2, {"x": k + 0.5, "n": k, "v": [k, k + 1, k + 2], "b": bool(k % 2), "j": {"a": k, "l": [1.5]}})
        for k, data in enumerate(jpegs)
    ]
    write(plain, tmp_path / "plain", **OPTS)
    assert all_files(tmp_path / "np") == all_files(tmp_path / "plain")
    ds = ShardDataset(tmp_path / "np", fields=["x", "n", "v", "j"])
    assert ds[3][2]["n"] == 3 and ds[3][2]["j"] == {"a": 3, "l": [1.5]}


CHILD = """
import sys, time
import numpy as np
from fastdata.packing.write import write
from tests.images import encode, natural_image
rng = np.random.default_rng(3)
jpegs = [encode(natural_image(rng, 20 + k % 5, 28), "JPEG", quality=90) for k in range(10)]
def slow():
    for k, data in enumerate(jpegs):
        if k == 4:
            print("mid-way", flush=True)
            time.sleep(60)
        yield data, k % 2
write(slow(), sys.argv[1], samples_per_shard=3, workers=0, progress=False)
"""


def test_ctrl_c_mid_way_then_a_rerun_writes_the_uninterrupted_bytes(jpegs, tmp_path):
    out = tmp_path / "out"
    root = Path(fastdata.__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=root,
        preexec_fn=terminal_signals,
    )
    assert proc.stdout.readline().strip() == "mid-way"
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    assert not out.exists() or not any(out.iterdir())  # a clean restart: nothing of the interrupted call is left
    write([(data, k % 2) for k, data in enumerate(jpegs)], out, **OPTS)
    write([(data, k % 2) for k, data in enumerate(jpegs)], tmp_path / "whole", **OPTS)
    assert all_files(out) == all_files(tmp_path / "whole")
