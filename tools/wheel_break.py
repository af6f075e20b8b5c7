"""Make a broken copy of a wheel for ``tools/wheel_check.sh --self-test``: without one kernel, or without the
library it bundles in ``fastdata.libs/`` (RECORD rewritten, so pip installs it as it is).

Usage: python wheel_break.py WHEEL {kernel,lib} OUTDIR
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path


def main() -> None:
    wheel, what, outdir = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    target = outdir / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
        if what == "kernel":
            drop = {n for n in src.namelist() if n.startswith("fastdata/decode/_jpegcrop.")}
        else:
            drop = {n for n in src.namelist() if n.startswith("fastdata.libs/") and not n.endswith("/")}
        if not drop:
            sys.exit(f"{wheel.name} has no {what} to remove")
        for info in src.infolist():
            if info.filename in drop:
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                data = b"".join(
                    line for line in data.splitlines(keepends=True) if line.split(b",")[0].decode() not in drop
                )
            dst.writestr(info, data)


if __name__ == "__main__":
    main()
