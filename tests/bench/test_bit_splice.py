"""The bit-level splice experiment (``bench/bit_splice.py``, issue 16): its identity check must keep passing.

A few JPEGs of every sampling the experiment covers (4:2:0, 4:2:2, 4:4:4, 4:4:0, 4:1:1, gray), 20 boxes each (edges,
corners, RandomResizedCrop): the bit splice at K = 1, 2, 4 and the harness's DRI splice decode exactly PIL's pixels
at the same DCT scale, the splices are taken, and the DC tables' appended categories are exercised.
"""

from __future__ import annotations

import importlib.util
import io
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.images import natural_image

pytest.importorskip("fastdata.decode._jpegcrop", reason="native JPEG kernel not built (python setup.py build_ext "
                    "--inplace)")

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bit_splice.py"


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    for tool in ("jpegtran", "cjpeg"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: apt-get install libjpeg-turbo-progs (tools/setup.sh installs it)")
    spec = importlib.util.spec_from_file_location("bit_splice_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.LIB = module.build_library(tmp_path_factory.mktemp("bitsplice"))
    return module


def _originals() -> list[bytes]:
    """Three photo-like JPEGs of odd sizes (no size a whole number of MCUs)."""
    out = []
    for seed, (h, w) in enumerate(((301, 437), (250, 333), (517, 389))):
        buffer = io.BytesIO()
        Image.fromarray(natural_image(np.random.default_rng(seed), h, w)).save(buffer, "JPEG", quality=90)
        out.append(buffer.getvalue())
    return out


def test_bit_splice_equals_dri_splice_and_pil(bench):
    harness = bench.Harness(bench.LIB)
    originals = _originals()
    sets = {"420": [bench.Record(bench.LIB, d) for d in originals], **bench.sampling_records(bench.LIB, originals, 2)}
    appended = 0
    for kind, records in sets.items():
        result = bench.check_identity(harness, records, 20)
        assert result["max_diff"] == 0 and not result["mismatches"], (kind, result["mismatches"][:3])
        assert result["cases"] == 20 * len(records)
        assert min(result["spliced"].values()) >= result["cases"] // 2, (kind, result["spliced"])
        appended += result["dc_appended"]
    assert appended > 0, "no DC difference needed a category the optimized table lacked: the case is untested"


def test_index_and_splice_are_real(bench):
    """The index has one entry per K MCUs of each row plus the end; a spliced sub-JPEG is smaller and PIL reads it."""
    record = bench.Record(bench.LIB, _originals()[0])
    pos, dc = record.index[1][:2]
    assert len(pos) == record.mcu_rows * record.per_row + 1 and np.all(np.diff(pos.astype(np.int64)) > 0)
    assert len(record.index[4][0]) == record.mcu_rows * -(-record.per_row // 4) + 1
    harness = bench.Harness(bench.LIB)
    denom, region = harness.plan(record.height, record.width, (40, 50, 100, 120), (224, 224))
    data, sub_region = harness.splice(1, record, denom, region)
    assert len(data) < len(record.nodri) // 2
    assert b"\xff\xdd" not in bytes(data)[:200]  # no DRI in the bit-spliced header
    image = Image.open(io.BytesIO(bytes(data)))
    image.load()
    assert image.size[0] >= sub_region[3] and image.size[1] >= sub_region[1]
    djpeg = subprocess.run(["djpeg"], input=bytes(data), capture_output=True)
    assert djpeg.returncode == 0 and djpeg.stderr == b"", djpeg.stderr  # libjpeg warns about no corrupt data
