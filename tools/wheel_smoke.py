"""What a user gets from ``pip install fastdata-*.whl``: run by tools/wheel_check.sh inside a fresh virtual
environment, outside the source tree. Each check that fails prints one ``FAIL:`` line; the exit code is the count.

Usage: python wheel_smoke.py WORKDIR
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

KERNELS = [
    "fastdata.decode._jpegcrop",
    "fastdata.packing._jpegtranscode",
    "fastdata.loader._floatbatch",
    "fastdata.transforms._affine",
    "fastdata.transforms._lut",
    "fastdata.decode._bilinear",
    "fastdata.formats._records",
]
#: What an extension may link outside the wheel: the C library and its parts (manylinux's own allow-list is
#: longer; ours is this short and stays so).
SYSTEM_LIBS = re.compile(r"^(linux-vdso\.so|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|ld-linux[-\w]*\.so)")
failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok:   " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures.append(what)


def cli(*args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("fastdata")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=300)


def check_install() -> Path:
    import fastdata

    package = Path(fastdata.__file__).parent
    purelib = Path(sysconfig.get_paths()["purelib"])
    check(package.parent == purelib, f"fastdata is imported from the environment ({package}), not a source tree")
    for name in KERNELS:
        try:
            importlib.import_module(name)
            check(True, f"{name} imports")
        except ImportError as exc:
            check(False, f"{name} does not import: {exc}")
    return package


def check_linking(package: Path) -> None:
    libs = (package.parent / "fastdata.libs").resolve()
    for so in sorted(package.rglob("*.so")):
        out = subprocess.run(["ldd", str(so)], capture_output=True, text=True, check=True).stdout
        print(f"ldd {so.relative_to(package.parent)}:\n" + "\n".join("  " + line.strip() for line in out.splitlines()))
        for line in out.splitlines():
            name, _, target = line.strip().partition(" => ")
            target = os.path.realpath(target.split(" (")[0].strip()) if target.startswith("/") else target
            if "statically linked" in line:  # no NEEDED entry at all (a kernel using only compiler builtins)
                continue
            if "not found" in line:
                check(False, f"{so.name} links {name}, which is nowhere")
            elif not SYSTEM_LIBS.match(Path(name.split(" ")[0]).name) and not target.startswith(str(libs)):
                check(False, f"{so.name} links {name} from {target}, outside the wheel and not the C library")


def check_native_decode(package: Path) -> None:
    import numpy as np
    from PIL import Image

    import fastdata

    decoder = fastdata.get_decoder("auto")
    check(decoder.name == "native", f'get_decoder("auto") is the native kernel (it is {decoder.name!r})')
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 48, 3), dtype=np.uint8))
    path = Path(os.environ["SMOKE_WORK"]) / "one.jpg"
    image.save(path, quality=90)
    pixels = decoder.decode(path.read_bytes())
    check(tuple(pixels.shape[:2]) == (64, 48), f"the native kernel decodes a 64x48 JPEG (got {pixels.shape})")
    maps = Path("/proc/self/maps").read_text()
    jpeg = sorted({os.path.realpath(line.split()[-1]) for line in maps.splitlines() if "libjpeg" in line})
    bundled = str((package.parent / "fastdata.libs").resolve())
    ours = [p for p in jpeg if p.startswith(bundled)]
    system = [p for p in jpeg if p.startswith(("/usr/", "/lib"))]  # Pillow's own copy in pillow.libs/ may be there
    check(bool(ours) and not system, f"libjpeg is loaded from the wheel ({ours}), none from the system ({system})")


def check_licences(package: Path) -> None:
    """Every library the wheel bundles has its licence in the installed .dist-info (licenses/bundled/)."""
    from importlib.metadata import distribution

    files = [str(f) for f in distribution("fastdata").files or []]
    bundled = sorted(p.name for p in (package.parent / "fastdata.libs").glob("*.so*"))
    for name in bundled:
        system_name = re.sub(r"-[0-9a-f]{8}(?=\.so)", "", name)
        notices = [f for f in files if "/licenses/bundled/" in f and Path(f).name.startswith(system_name + "-")]
        check(bool(notices), f"the licence of the bundled {name} is installed ({notices})")


def make_images(root: Path, count: int = 50) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(1)
    sizes = [(96, 64), (200, 150), (33, 47), (320, 240), (64, 64)]
    for i in range(count):
        folder = root / f"class{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        w, h = sizes[i % len(sizes)]
        y, x = np.mgrid[0:h, 0:w]
        rgb = np.stack([(x * 255 // w), (y * 255 // h), rng.integers(0, 255, (h, w))], axis=-1).astype(np.uint8)
        image = Image.fromarray(rgb).convert("L") if i % 17 == 0 else Image.fromarray(rgb)
        image.save(folder / f"img{i:03d}.jpg", quality=85)


def check_pack_and_read(work: Path) -> None:
    import torch

    import fastdata
    from fastdata.transforms import RandomResizedCrop

    images = work / "images"
    make_images(images)
    for fmt in ("tfrecord", "lmdb"):
        out = work / fmt
        done = cli("pack", str(images), str(out), "--format", fmt, "--samples-per-shard", "16", "--no-progress")
        check(done.returncode == 0, f"fastdata pack --format {fmt}: {(done.stdout + done.stderr).strip()[-300:]}")
        verified = cli("verify", str(out))
        check(
            verified.returncode == 0, f"fastdata verify ({fmt}): {(verified.stdout + verified.stderr).strip()[-300:]}"
        )
        dataset = fastdata.ShardDataset(out, transform=RandomResizedCrop(32))
        loader = fastdata.DataLoaderX(dataset, batch_size=8, num_workers=2, collate_fn=fastdata.fast_collate)
        labels = torch.cat([batch[1] for batch in loader]).tolist()
        check(len(labels) == 50, f"DataLoaderX with 2 workers reads all 50 {fmt} samples (read {len(labels)})")
        check(sorted(labels) == sorted(i % 3 for i in range(50)), f"the {fmt} labels are the folders' classes")


def main() -> int:
    work = Path(sys.argv[1])
    os.environ["SMOKE_WORK"] = str(work)
    check(not os.environ.get("LD_LIBRARY_PATH"), "LD_LIBRARY_PATH is unset")
    package = check_install()
    check_linking(package)
    check_native_decode(package)
    check_licences(package)
    import fastdata

    version = cli("--version")
    check(version.stdout.strip() == f"fastdata {fastdata.__version__}", f"fastdata --version: {version.stdout.strip()}")
    check_pack_and_read(work)
    print(f"{len(failures)} failed" if failures else "all checks passed")
    return len(failures)


if __name__ == "__main__":
    sys.exit(main())
