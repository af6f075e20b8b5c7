"""``verify`` and ``inspect`` at scale: shards checked side by side in a process pool (capped at the CPUs) with the
findings of a serial run, a progress bar on a terminal only, sparse shards refused in one line before anything of
their declared size is allocated, and ``inspect --json`` for scripts."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fastdata.cli import main
from fastdata.formats.errors import CorruptRecordError
from fastdata.packing import check
from fastdata.packing.check import describe, verify
from tests.packs import edit_manifest, flip_bit


@pytest.fixture
def damaged(packed, tmp_path) -> Path:
    """A pack (2 samples a shard) damaged in four shards: a flipped record byte, a missing shard, a shard of the
    wrong size, and a label in targets.npy that its record contradicts."""
    from fastdata.formats.files import crc32c_hex
    from fastdata.formats.targets import encode_targets
    from fastdata.packing.packer import pack

    root = tmp_path / "ds"
    pack(
        packed[1].root,
        root,
        format=json.loads((packed[0] / "manifest.json").read_text())["format"],
        samples_per_shard=2,
        workers=0,
        progress=False,
    )
    manifest = json.loads((root / "manifest.json").read_text())
    shards = manifest["shards"]
    assert len(shards) >= 6
    flip_bit(root / shards[1]["path"], 8 * (shards[1]["nbytes"] // 2))
    (root / shards[2]["path"]).unlink()
    with open(root / shards[3]["path"], "ab") as f:
        f.write(b"\0")
    labels = np.load(root / "targets.npy")
    labels[9] = (labels[9] + 1) % len(manifest["classes"])
    data = encode_targets(labels)
    (root / "targets.npy").write_bytes(data)
    edit_manifest(root, lambda m: m.update(targets_crc32c=crc32c_hex(data)))
    return root


def test_shards_are_checked_in_a_pool_capped_at_the_cpus_with_the_serial_findings(damaged, monkeypatch):
    import fastdata.packing.pool as pool

    sizes = []

    class Spy(pool.OrderedProcessMap):
        def __init__(self, *args, workers, **kwargs):
            sizes.append(workers)
            super().__init__(*args, workers=workers, **kwargs)

    monkeypatch.setattr(check, "OrderedProcessMap", Spy)
    serial = verify(damaged, workers=0)
    assert sizes == [] and len(serial.problems) >= 4
    assert any("sample 9 has label" in p for p in serial.problems) and any("missing" in p for p in serial.problems)
    monkeypatch.setattr(pool, "available_cpus", lambda: 3)
    parallel = verify(damaged)
    assert sizes == [3]  # every CPU this process may use
    assert parallel.problems == serial.problems and parallel.records == serial.records
    assert verify(damaged, workers=8, decode=False).problems == verify(damaged, workers=1, decode=False).problems
    assert sizes == [3, 3]  # capped at the CPUs; workers=1 runs in this process


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("packed", ["tfrecord"], indirect=True)
def test_verify_shows_progress_on_a_terminal_only(packed, monkeypatch, capsys):
    root, _ = packed
    n = json.loads((root / "manifest.json").read_text())["num_samples"]
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["verify", str(root), "--no-decode"]) == 0
    assert "verify: 100%" in terminal.getvalue() and f"{n}/{n}" in terminal.getvalue()
    quiet = _Terminal()
    monkeypatch.setattr(sys, "stderr", quiet)
    assert main(["verify", str(root), "--quiet"]) == 0 and quiet.getvalue() == ""
    monkeypatch.undo()
    assert main(["verify", str(root)]) == 0
    captured = capsys.readouterr()
    assert "%|" not in captured.err and f"OK: {n} records checked" in captured.out


@pytest.mark.parametrize("packed", ["lmdb"], indirect=True)
def test_inspect_json_is_one_object_for_scripts(packed, capsys):
    root, info = packed
    assert main(["inspect", str(root), "--json"]) == 0
    out = capsys.readouterr().out
    data = json.loads(out)
    assert out.count("\n") == 1 and data["format"] == "lmdb" and data["num_samples"] == len(info.good)
    assert [c["name"] for c in data["classes"]] == info.classes
    assert [c["count"] for c in data["classes"]] == [
        sum(label == i for _, label in info.good) for i in range(len(info.classes))
    ]
    assert sum(s["num_samples"] for s in data["shards"]) == len(info.good) and data["nbytes"] > 0
    assert data["transcoded"] == sum(s["transcoded"] for s in data["shards"]) > 0
    assert {s["path"] for s in data["skipped"]} == set(info.bad) and data["options"]["format"] == "lmdb"


DECLARED = 50_000_000  # 400 MB of labels, 3.2 GB of shard: all holes

CHECK = textwrap.dedent("""
    import sys
    from fastdata.packing.check import describe, verify

    def kb(key):
        return int(next(line for line in open("/proc/self/status") if line.startswith(key)).split()[1])

    open("/proc/self/clear_refs", "w").write("5")
    base = kb("VmRSS:")
    if sys.argv[2] == "verify":
        print(" | ".join(verify(sys.argv[1]).problems))
    else:
        try:
            describe(sys.argv[1])
            print("described")
        except ValueError as exc:
            print(str(exc).replace("\\n", " "))
    print((kb("VmHWM:") - base) // 1024)
""")


@pytest.mark.parametrize("fmt", ["lmdb", "tfrecord"])
def test_a_sparse_pack_declaring_fifty_million_samples_is_refused_in_one_line(tmp_path, fmt, monkeypatch):
    import tests.formats.test_declared_counts as declared

    monkeypatch.setattr(declared, "DECLARED", DECLARED)  # the same sparse pack, declaring five times as many
    out = declared._sparse_pack(tmp_path, fmt)
    repo = Path(__file__).resolve().parents[2]
    for command in ("verify", "inspect"):
        done = subprocess.run(
            [sys.executable, "-c", CHECK, str(out), command],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=repo,
            env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"},
        )
        assert done.returncode == 0, done.stderr[-2000:]
        verdict, peak_mb = done.stdout.splitlines()
        assert verdict.startswith("shard-00000.") and "too few for the 50000000 records" in verdict, verdict
        assert "sparse" in verdict and int(peak_mb) < 50, f"{command} grew by {peak_mb} MB"
    with pytest.raises(CorruptRecordError, match="sparse"):
        describe(out)
    assert main(["inspect", str(out)]) == 2
