#!/usr/bin/env python
"""Run timm's ``train.py`` on a fastdata pack, with the one-line change the README documents.

timm's training script is not part of the timm wheel: pass the path of a ``train.py`` from the timm source of the
installed version. This copies it to a temporary folder, adds after its ``from timm.data import ...`` statement::

    from fastdata.integrations.timm import create_dataset, create_loader

and runs it on CPU for one short epoch (training and validation) on a tiny pack made here (or ``--data``, a folder
holding ``train/`` and ``validation/`` packs). It fails unless train.py finishes, its loaders were fastdata's, and it
wrote its ``summary.csv``. Nothing is downloaded.

Usage::

    python tools/timm_train.py PATH/train.py                  # a tiny pack, test_resnet, 1 epoch on CPU
    python tools/timm_train.py PATH/train.py --data DIR -- --model resnet10t -b 32   # more train.py arguments
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMPORT_LINE = "from fastdata.integrations.timm import create_dataset, create_loader"

# Runs the patched train.py as __main__, then checks the names its main() used. The torchvision shim of the tests
# lets ``import torchvision`` work where its compiled ops do not match the installed torch (a no-op otherwise).
RUNNER = """\
import runpy, sys
try:
    import tests.torchvision_shim  # noqa: F401
except ImportError:
    pass
train_py = sys.argv[1]
sys.argv = sys.argv[1:]
names = runpy.run_path(train_py, run_name="__main__")
used = {name: names[name].__module__ for name in ("create_dataset", "create_loader")}
print("train.py used:", used)
sys.exit(0 if set(used.values()) == {"fastdata.integrations.timm"} else 3)
"""


def patch(source: str) -> str:
    """``source`` with :data:`IMPORT_LINE` added after its top-level ``from timm.data import ...`` statement."""
    tree = ast.parse(source)
    found = [node for node in tree.body if isinstance(node, ast.ImportFrom) and node.module == "timm.data"]
    if not found:
        raise ValueError("no top-level 'from timm.data import ...' in this file: is it timm's train.py?")
    lines = source.splitlines(keepends=True)
    end = found[-1].end_lineno
    return "".join(lines[:end] + [IMPORT_LINE + "\n"] + lines[end:])


def make_data(root: Path) -> Path:
    """A tiny pack: 32 small JPEGs in 2 classes, packed as ``train/`` and ``validation/``."""
    import numpy as np
    from PIL import Image

    from fastdata import pack

    rng = np.random.default_rng(0)
    for label, name in enumerate(("ant", "bee")):
        folder = root / "src" / name
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(16):
            pixels = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) // 2 + 64 * (label + 1)
            Image.fromarray(pixels).save(folder / f"{name}_{i:02d}.jpg", quality=90)
    for split in ("train", "validation"):
        pack(root / "src", root / "data" / split, format="tfrecord", workers=0, progress=False)
    return root / "data"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("train_py", type=Path, help="timm's train.py (from the source of the installed timm)")
    parser.add_argument("--data", type=Path, help="a folder with train/ and validation/ packs (default: a tiny one)")
    args, extra = parser.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    if not args.train_py.is_file():
        parser.error(f"{args.train_py} is not a file: pass timm's train.py")
    with tempfile.TemporaryDirectory(prefix="fastdata-timm-") as tmp:
        tmp_path = Path(tmp)
        patched = tmp_path / "train.py"
        patched.write_text(patch(args.train_py.read_text()))
        data = args.data or make_data(tmp_path)
        output = tmp_path / "output"
        command = [
            sys.executable,
            "-c",
            RUNNER,
            str(patched),
            str(data),
            "--device",
            "cpu",
            "--model",
            "test_resnet",
            "--num-classes",
            "2",
            "--img-size",
            "32",
            "-b",
            "8",
            "--workers",
            "2",
            "--epochs",
            "1",
            "--warmup-epochs",
            "0",
            "--lr",
            "0.01",
            "--log-interval",
            "1",
            "--output",
            str(output),
            "--experiment",
            "run",
            *extra,
        ]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        print("$", " ".join(command[:2]), "RUNNER", " ".join(command[3:]), flush=True)
        code = subprocess.run(command, env=env, cwd=tmp_path).returncode
        summary = output / "run" / "summary.csv"
        if code == 0 and not summary.is_file():
            print(f"train.py finished but wrote no {summary.name}")
            code = 4
        if code == 0:
            print(summary.read_text().strip())
        print("OK: train.py trained on fastdata's loaders" if code == 0 else f"FAILED (exit code {code})")
        return code


if __name__ == "__main__":
    sys.exit(main())
