"""A list of a million rows packs in bounded memory: the scan, the jobs and the pool are streamed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROWS = 1_000_000
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


@pytest.mark.slow
def test_a_million_row_csv_packs_with_peak_rss_under_500_mb(tmp_path):
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROWS), str(tmp_path)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=3600,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    samples, classes, peak_mb = map(int, done.stdout.split())
    assert samples == ROWS and classes == 10
    print(f"peak RSS {peak_mb} MB")  # shown with -s
    assert peak_mb < LIMIT_MB, f"peak RSS {peak_mb} MB"
