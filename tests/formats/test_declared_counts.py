"""Memory follows the bytes a pack really holds, not the counts it declares.

A pack whose manifest, ``targets.npy`` and shard are grown with holes (sparse files: a few KB on
disk, a 448-byte archive) to declare ten million samples must be refused in one line before
anything of that size is allocated: by what the manifest records (a TFRecord index too small to
list the records) when the dataset opens, else by the shard's own count (an LMDB meta page and
``__meta__``) when the shard is first read; the labels are checked in bounded memory and mapped,
never copied. The peak memory of ``ShardDataset()`` and a first read is measured in a fresh process.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fastdata._util.fs import file_crc32c
from fastdata.packing.packer import pack
from tests.images import encode, natural_image

DECLARED = 10_000_000  # 80 MB of labels, 640 MB of shard, all holes

OPEN = textwrap.dedent("""
    import sys
    from fastdata.datasets.shard_dataset import ShardDataset
    from fastdata.formats.errors import CorruptRecordError

    def kb(key):
        return int(next(line for line in open("/proc/self/status") if line.startswith(key)).split()[1])

    open("/proc/self/clear_refs", "w").write("5")  # the peak so far (imports) is forgotten
    base = kb("VmRSS:")
    try:
        ShardDataset(sys.argv[1]).read(0)  # a count the shard disproves: refused at open or at its first read
        print("opened")
    except CorruptRecordError as exc:
        print("refused", str(exc).replace("\\n", " "))
    print((kb("VmHWM:") - base) // 1024)
""")


VERIFY = textwrap.dedent("""
    import sys
    from fastdata.packing.check import verify

    def kb(key):
        return int(next(line for line in open("/proc/self/status") if line.startswith(key)).split()[1])

    open("/proc/self/clear_refs", "w").write("5")
    base = kb("VmRSS:")
    report = verify(sys.argv[1])
    print(len(report.problems), (kb("VmHWM:") - base) // 1024)
""")


def _sparse_pack(root: Path, fmt: str) -> Path:
    src = root / "src"
    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        (src / c).mkdir(parents=True)
        for k in range(2):
            (src / c / f"{k}.jpg").write_bytes(encode(natural_image(rng, 8, 8), "JPEG"))
    out = root / "out"
    pack(src, out, format=fmt, workers=0, progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<i8", "fortran_order": False, "shape": (DECLARED,)})
    targets = out / manifest["targets"]
    with open(targets, "wb") as f:  # a valid header (magic included), then holes: ten million labels of class 0
        f.write(header.getvalue())
        f.truncate(f.tell() + 8 * DECLARED)
    shard = manifest["shards"][0]
    with open(out / shard["path"], "r+b") as f:  # the real shard, then holes up to room for every record
        f.truncate(64 * DECLARED)
    shard.update(num_samples=DECLARED, nbytes=64 * DECLARED)
    manifest.update(
        shards=[shard],
        num_samples=DECLARED,
        targets_nbytes=targets.stat().st_size,
        targets_crc32c=file_crc32c(targets),
        transcoded=[[0, DECLARED]],
    )
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


@pytest.mark.parametrize("fmt", ["lmdb", "tfrecord"])
def test_a_sparse_pack_declaring_ten_million_samples_is_refused_in_bounded_memory(tmp_path, fmt):
    out = _sparse_pack(tmp_path, fmt)
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", OPEN, str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=repo,
        env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    verdict, peak_mb = done.stdout.splitlines()
    assert verdict.startswith("refused") and f"the manifest says {DECLARED}" in verdict, verdict
    assert int(peak_mb) < 20, f"ShardDataset() grew by {peak_mb} MB before refusing"


@pytest.mark.parametrize("fmt", ["lmdb", "tfrecord"])
def test_verify_of_a_sparse_pack_stays_within_its_labels_file(tmp_path, fmt):
    """``verify`` reads what is there; the ranges the manifest declares (ten million "transcoded" records) cost
    nothing. Its peak is bounded by the 80 MB labels file it checks (read, then held as int64), not by the counts."""
    out = _sparse_pack(tmp_path, fmt)
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", VERIFY, str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=repo,
        env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    problems, peak_mb = map(int, done.stdout.split())
    assert problems >= 1
    labels_mb = 8 * DECLARED // 2**20
    assert int(peak_mb) < 3 * labels_mb, f"verify grew by {peak_mb} MB"


INDEX = textwrap.dedent("""
    import sys
    from fastdata.formats.tfrecord_index import read_index

    def kb(key):
        return int(next(line for line in open("/proc/self/status") if line.startswith(key)).split()[1])

    open("/proc/self/clear_refs", "w").write("5")
    base = kb("VmRSS:")
    index = read_index(sys.argv[1])
    print(len(index), (kb("VmHWM:") - base) // 1024)
""")


def test_a_tfrecord_index_is_parsed_in_a_small_multiple_of_its_size(tmp_path):
    lines = 2_000_000
    path = tmp_path / "big.idx"
    path.write_bytes(b"".join(b"%d 20000\n" % (i * 20000) for i in range(lines)))
    size_mb = path.stat().st_size / 2**20
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", INDEX, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=repo,
        env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    count, peak_mb = map(int, done.stdout.split())
    assert count == lines
    assert peak_mb < 3 * size_mb, f"parsing a {size_mb:.0f} MB index took {peak_mb} MB"
