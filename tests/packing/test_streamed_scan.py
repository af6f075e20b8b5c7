"""A list of a million rows packs in bounded memory: the scan, the jobs and the pool are streamed.

Measured at 40,000 and 120,000 rows (a sixth of the CI time of one million-row pack): each peak is under the
limit, and the growth from one to the other, carried on linearly to a million rows, stays under it too (measured
2026-11-29: 281 MB at 40,000 rows, 290 MB at 120,000, so 389 MB at a million). A pack that kept a few hundred bytes
per row in memory (a list of its rows) would grow by that many hundred MB per million rows and fail the second check.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SMALL, LARGE, TARGET = 40_000, 120_000, 1_000_000
LIMIT_MB = 500

SCRIPT = textwrap.dedent("""
    import resource, sys
    from pathlib import Path
    import numpy as np
    from tests.images import encode, natural_image
    from fastdata.packing.packer import pack

    rows, root = int(sys.argv[1]), Path(sys.argv[2])
    rng = np.random.default_rng(0)
    for k in range(16):
        (root / f"{k}.jpg").write_bytes(encode(natural_image(rng, 8, 8), "JPEG", quality=80))
    with open(root / "list.csv", "w") as f:
        f.write("path,label,weight\\n")
        f.writelines(f"{k % 16}.jpg,c{k % 10},{k % 7}\\n" for k in range(rows))
    manifest = pack(root / "list.csv", root / "out", format="tfrecord", fields="weight", workers=2, progress=False)
    # VmHWM, not getrusage(RUSAGE_SELF): Linux carries the starting process's peak (pytest's) across exec
    own = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1])
    peak = max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    print(manifest.num_samples, len(manifest.classes), peak // 1024)
""")


def _peak_mb(rows: int, folder: Path) -> int:
    root = Path(__file__).resolve().parents[2]
    folder.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(rows), str(folder)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=1800,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    samples, classes, peak_mb = map(int, done.stdout.split())
    assert samples == rows and classes == 10
    return peak_mb


@pytest.mark.slow
def test_a_million_row_csv_packs_with_peak_rss_under_500_mb(tmp_path):
    small, large = _peak_mb(SMALL, tmp_path / "small"), _peak_mb(LARGE, tmp_path / "large")
    at_target = large + max(large - small, 0) * (TARGET - LARGE) / (LARGE - SMALL)
    print(f"peak RSS {small} MB at {SMALL} rows, {large} MB at {LARGE}; {at_target:.0f} MB at {TARGET} (linear)")
    assert small < LIMIT_MB and large < LIMIT_MB, (small, large)
    assert at_target < LIMIT_MB, (
        f"peak RSS grows {large - small} MB per {LARGE - SMALL} rows: {at_target:.0f} MB at {TARGET}"
    )
