#!/usr/bin/env python3
"""Fuzz the native crop-region JPEG kernel (``fastdata.decode._jpegcrop``) with damaged JPEGs.

Real JPEGs of every kind fastdata meets (baseline, progressive, restart markers, grayscale,
CMYK, 4:4:4 / 4:2:2 / 4:2:0, odd sizes; with ``cjpeg`` also arithmetic coding, 4:1:1 and
4:4:0) are damaged at random (byte and bit flips, flips inside the headers, truncation,
inserted and deleted bytes, duplicated chunks) and decoded through the kernel's C API: the
header, a full decode at a random DCT scale and random crops. Every case must end in an
image (possibly with libjpeg warnings) or a ``JpegError``: anything else, a crash, a
sanitizer report or a case that takes longer than ``--timeout`` seconds is a failure, and
the damaged input is saved for replay.

Cases run in a worker process that the driver restarts after a crash or a hang; case
``i`` is fully determined by ``--seed`` and ``i``, so ``--start i --cases 1`` replays it.

    python tools/fuzz_jpeg.py                       # 10,000 cases, the in-tree build
    python tools/fuzz_jpeg.py --asan                # build an AddressSanitizer copy and use it
    python tools/fuzz_jpeg.py --valgrind --cases 2000
    python tools/fuzz_jpeg.py --asan --restart      # restart-interval transcodes only (the splice path)

``--asan`` compiles ``fastdata/decode/_jpegcrop.c`` with ``-fsanitize=address`` into a
temporary folder and runs the workers with ``LD_PRELOAD=libasan.so`` and
``ASAN_OPTIONS=detect_leaks=0``. ``--valgrind`` runs the workers under memcheck
(``apt-get install valgrind``), which also reports reads of uninitialised memory.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import random
import re
import selectors
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "fastdata" / "decode" / "_jpegcrop.c"
MODULE = "fastdata.decode._jpegcrop"
# The pixel limit a caller applies after header() (fastdata's Python policy); keeps each
# case fast. Larger declared sizes still go through header() and, cropped, decode_region().
MAX_FULL_PIXELS = 1 << 22
DECOMPRESSOR_MAX_PIXELS = 1 << 26


# ---- corpus ---------------------------------------------------------------------------


def _cjpeg(array, *args: str) -> bytes | None:
    """Encode with libjpeg-turbo's cjpeg (arithmetic coding, unusual sampling), if installed."""
    cjpeg = shutil.which("cjpeg")
    if cjpeg is None:
        return None
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PPM")
    done = subprocess.run([cjpeg, *args], input=buf.getvalue(), capture_output=True, check=False)
    return done.stdout if done.returncode == 0 and done.stdout else None


def _jpegtran(data: bytes, *args: str) -> bytes | None:
    """Transcode losslessly with libjpeg-turbo's jpegtran (restart intervals), if installed."""
    jpegtran = shutil.which("jpegtran")
    if jpegtran is None:
        return None
    done = subprocess.run([jpegtran, *args], input=data, capture_output=True, check=False)
    return done.stdout if done.returncode == 0 and done.stdout else None


def restart_corpus(corpus: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """``jpegtran -optimize -restart`` copies of the baseline files: intervals of 1, 2 MCUs and a whole row,
    the layout whose crops the kernel decodes from only their intervals."""
    wanted = (
        "baseline420",
        "baseline422_odd",
        "baseline444",
        "gray",
        "cmyk",
        "tiny",
        "thin444",
        "sample411",
        "sample440_restart",
    )
    out = []
    for name, data in corpus:
        if name not in wanted:
            continue
        for restart in ("1B", "2B", "1"):
            transcoded = _jpegtran(data, "-optimize", "-restart", restart)
            if transcoded is not None:
                out.append((f"rst{restart}_{name}", transcoded))
    return out


def build_corpus(*, small: bool = False, restart_only: bool = False) -> list[tuple[str, bytes]]:
    """Named, valid JPEGs of every kind; ``small`` keeps them tiny (for the pytest version); ``restart_only``
    keeps only the restart-interval transcodes (needs jpegtran)."""
    import numpy as np

    sys.path.insert(0, str(ROOT))  # the test image generator lives with the tests
    from tests.images import encode, natural_image

    def _pil(array, mode: str | None = None, **kwargs) -> bytes:
        return encode(array, "JPEG", mode, **kwargs)

    rng = np.random.default_rng(1234)
    big = (96, 128) if small else (190, 250)
    sizes = {"mid": big, "odd": (97, 131), "tiny": (3, 5), "one": (1, 1), "thin": (17, 9)}
    img = {name: natural_image(rng, *hw) for name, hw in sizes.items()}
    corpus = [
        ("baseline420", _pil(img["mid"], quality=90)),
        ("baseline422_odd", _pil(img["odd"], quality=90, subsampling=1)),
        ("baseline444", _pil(img["mid"], quality=95, subsampling=0)),
        ("progressive420", _pil(img["mid"], quality=90, progressive=True)),
        ("progressive444_odd", _pil(img["odd"], quality=85, progressive=True, subsampling=0)),
        ("restart_blocks", _pil(img["mid"], quality=90, restart_marker_blocks=3)),
        ("restart_rows_odd", _pil(img["odd"], quality=90, restart_marker_rows=1, subsampling=1)),
        ("restart_progressive", _pil(img["odd"], quality=90, progressive=True, restart_marker_blocks=2)),
        ("gray", _pil(img["mid"][..., 0], quality=90)),
        ("gray_progressive_odd", _pil(img["odd"][..., 1], quality=90, progressive=True)),
        ("cmyk", _pil(img["odd"], "CMYK", quality=92)),
        ("cmyk_progressive", _pil(img["thin"], "CMYK", quality=92, progressive=True)),
        ("tiny", _pil(img["tiny"], quality=90)),
        ("one_pixel", _pil(img["one"], quality=90)),
        ("thin444", _pil(img["thin"], quality=90, subsampling=0)),
    ]
    for name, args in (
        ("arithmetic", ("-arithmetic", "-quality", "90")),
        ("arithmetic_progressive", ("-arithmetic", "-progressive", "-quality", "90")),
        ("sample411", ("-sample", "4x1", "-quality", "90")),
        ("sample440_restart", ("-sample", "1x2", "-restart", "1", "-quality", "90")),
        ("sample42_progressive", ("-sample", "4x2", "-progressive", "-quality", "90")),
    ):
        data = _cjpeg(img["odd"], *args)
        if data is not None:
            corpus.append((name, data))
    restarts = restart_corpus(corpus)
    if restart_only:
        if not restarts:
            sys.exit("jpegtran is needed for the restart corpus (apt-get install libjpeg-turbo-progs)")
        return restarts
    return corpus + restarts


# ---- mutations ------------------------------------------------------------------------


def _first_sos(data: bytes) -> int:
    pos = data.find(b"\xff\xda")
    return pos if pos > 0 else len(data)


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One random kind of damage; returns the damaged bytes and what was done."""
    buf = bytearray(data)
    kinds = ["flip", "bitflip", "header", "truncate", "flip+truncate", "insert", "delete", "duplicate"]
    start = _first_sos(data)
    markers = [m.start() for m in re.finditer(rb"\xff[\xd0-\xd7]", data[start:])]
    markers = [start + m for m in markers]
    if markers:
        kinds += ["rst", "rst", "rst+bitflip"]
    kind = rng.choice(kinds)
    if kind.startswith("rst"):  # a restart marker renumbered, dropped, repeated, or a stray one added
        for _ in range(rng.randint(1, 3)):
            pos = rng.choice(markers)
            if pos + 1 >= len(buf) or buf[pos] != 0xFF:
                continue
            action = rng.randrange(4)
            if action == 0:
                buf[pos + 1] = 0xD0 + rng.randrange(8)
            elif action == 1:
                del buf[pos : pos + 2]
            elif action == 2:
                buf[pos:pos] = buf[pos : pos + 2]
            else:
                at = rng.randrange(start, len(buf))
                buf[at:at] = bytes((0xFF, 0xD0 + rng.randrange(8)))
        if kind == "rst+bitflip":
            buf[rng.randrange(start, len(buf))] ^= 1 << rng.randrange(8)
    if kind in ("flip", "flip+truncate"):
        for _ in range(rng.randint(1, 8)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
    elif kind == "bitflip":
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    elif kind == "header":  # the tables, frame and scan headers, where damage bites hardest
        end = min(len(buf), _first_sos(data) + 16)
        for _ in range(rng.randint(1, 3)):
            pos = rng.randrange(end)
            buf[pos] = rng.choice((0, 1, 2, 4, 0x10, 0x7F, 0x80, 0xFF, rng.randrange(256), buf[pos] ^ 1))
    elif kind == "insert":
        pos = rng.randrange(len(buf) + 1)
        buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    elif kind == "delete":
        pos = rng.randrange(len(buf))
        del buf[pos : pos + rng.randint(1, 32)]
    elif kind == "duplicate":
        start = rng.randrange(len(buf))
        chunk = buf[start : start + rng.randint(1, 200)]
        pos = rng.randrange(len(buf) + 1)
        buf[pos:pos] = chunk
    if kind in ("truncate", "flip+truncate"):
        del buf[rng.randrange(len(buf) + 1) :]
    return bytes(buf), kind


def make_case(corpus: list[tuple[str, bytes]], seed: int, index: int) -> tuple[str, bytes, random.Random]:
    """Case ``index`` of run ``seed``: (description, damaged bytes, the rng for its decodes)."""
    rng = random.Random(seed * 1_000_003 + index)
    name, data = corpus[rng.randrange(len(corpus))]
    damaged, kind = mutate(data, rng)
    return f"{name}/{kind}", damaged, rng


# ---- one case -------------------------------------------------------------------------


def run_case(module, decompressor, data: bytes, rng: random.Random) -> str:
    """Decode one damaged JPEG every way; 'ok', 'warn' (image with warnings) or 'error'.

    Only ``JpegError`` is an acceptable failure; any other exception propagates.
    """
    try:
        height, width, _, _ = decompressor.header(data)
    except module.JpegError:
        return "error"
    warned = False
    errors = 0
    denom = rng.choice((1, 2, 4, 8))
    sh, sw = -(-height // denom), -(-width // denom)
    boxes = []
    if sh * sw <= MAX_FULL_PIXELS:
        boxes.append((0, sh, 0, sw))
    for _ in range(2):
        y0, x0 = rng.randrange(sh), rng.randrange(sw)
        y1 = min(sh, y0 + 1 + rng.randrange(min(sh - y0, 256)))
        x1 = min(sw, x0 + 1 + rng.randrange(min(sw - x0, 256)))
        boxes.append((y0, y1, x0, x1))
    for y0, y1, x0, x1 in boxes:
        out = bytearray((y1 - y0) * (x1 - x0) * 3)
        try:
            rows, cols, warnings = decompressor.decode_region(data, denom, y0, y1, x0, x1, out)
        except module.JpegError:
            errors += 1
            continue
        if (rows, cols) != (y1 - y0, x1 - x0):
            raise AssertionError(f"decode_region returned {(rows, cols)} for box {(y0, y1, x0, x1)}")
        warned = warned or warnings > 0
    # The kernel must refuse bad boxes and small buffers with ValueError, not write out of bounds.
    # (The box is checked before the buffer, so a small buffer tests the box check.)
    for bad, size in (((0, sh + 1, 0, sw), 3), ((0, sh, sw, sw), 3), ((-1, 1, 0, 1), 3), ((0, 1, 0, 1), 2)):
        try:
            decompressor.decode_region(data, denom, *bad, bytearray(size))
        except ValueError:  # JpegError is a ValueError too
            pass
        else:
            raise AssertionError(f"bad box {bad} or {size}-byte buffer for a {sh}x{sw} image was accepted")
    if errors:
        return "error"
    return "warn" if warned else "ok"


def load_path(path: str | None) -> str:
    """``path``, or the in-tree build of the kernel."""
    if path is None:
        candidate = SOURCE.with_name("_jpegcrop" + sysconfig.get_config_var("EXT_SUFFIX"))
        if not candidate.exists():
            sys.exit(f"{candidate} is missing: build it with `python setup.py build_ext --inplace`")
        path = str(candidate)
    return path


def load_module(path: str | None):
    """The kernel: from ``path`` (e.g. an ASan build) or the in-tree build; no fastdata import."""
    spec = importlib.util.spec_from_file_location(MODULE, load_path(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- worker and driver ----------------------------------------------------------------


def _worker(args: argparse.Namespace) -> None:
    corpus = [(p.stem, p.read_bytes()) for p in sorted(Path(args.corpus_dir).iterdir())]
    module = load_module(args.ext)
    decompressor = module.Decompressor(max_pixels=DECOMPRESSOR_MAX_PIXELS)
    out = sys.stdout
    for index in range(args.start, args.start + args.cases):
        print(f"start {index}", file=out, flush=True)
        _, data, rng = make_case(corpus, args.seed, index)
        try:
            outcome = run_case(module, decompressor, data, rng)
        except Exception as exc:  # noqa: BLE001 (reported to the driver as a failure)
            outcome = f"FAIL {type(exc).__name__}: {exc}".replace("\n", " ")
        print(f"done {index} {outcome}", file=out, flush=True)
    if getattr(decompressor, "spliced", 0):  # decodes that read only the box's restart intervals
        print(f"spliced {decompressor.spliced} decodes", file=sys.stderr)


def build_asan(workdir: Path) -> Path:
    """Compile the kernel with AddressSanitizer into ``workdir``; returns the .so path."""
    target = workdir / ("_jpegcrop_asan" + sysconfig.get_config_var("EXT_SUFFIX"))
    include = sysconfig.get_paths()["include"]
    command = [
        os.environ.get("CC", "gcc"),
        "-shared",
        "-fPIC",
        "-O1",
        "-g",
        "-fsanitize=address",
        "-fno-omit-frame-pointer",
        f"-I{include}",
        str(SOURCE),
        "-o",
        str(target),
        "-ljpeg",
    ]
    subprocess.run(command, check=True)
    return target


# Errors whose innermost frame is inside CPython itself (pyenv builds are not memcheck-clean,
# e.g. int.from_bytes during start-up); errors in the kernel and libjpeg still count.
_CPYTHON_SUPPRESSIONS = "".join(
    f"{{\n   cpython-{kind}\n   Memcheck:{kind}\n   obj:*libpython3*\n}}\n" for kind in ("Cond", "Value8", "Value4")
)


def _asan_env() -> dict[str, str]:
    libasan = subprocess.run(
        [os.environ.get("CC", "gcc"), "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    env = dict(os.environ)
    env["LD_PRELOAD"] = libasan
    env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=0:halt_on_error=1"
    return env


def drive(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="fuzz_jpeg_"))
    corpus = build_corpus(small=args.small, restart_only=args.restart)
    corpus_dir = tmp / "corpus"
    corpus_dir.mkdir()
    for name, data in corpus:
        (corpus_dir / f"{name}.jpg").write_bytes(data)
    corpus = [(p.stem, p.read_bytes()) for p in sorted(corpus_dir.iterdir())]  # the worker's order
    print(f"corpus: {len(corpus)} JPEGs ({', '.join(n for n, _ in corpus)})")
    env, prefix, ext = dict(os.environ), [], args.ext
    tool = "none"
    if ext is None:  # a private copy: a rebuild during the run must not change the mapped library
        ext = str(shutil.copy(load_path(None), tmp / "_jpegcrop_copy.so"))
    if args.asan:
        ext = str(build_asan(tmp))
        env = _asan_env()
        tool = f"AddressSanitizer ({ext})"
    if args.valgrind:
        if shutil.which("valgrind") is None:
            sys.exit("valgrind is not installed (apt-get install -y valgrind)")
        env["PYTHONMALLOC"] = "malloc"  # CPython's small-object allocator confuses memcheck
        suppressions = tmp / "cpython.supp"
        suppressions.write_text(_CPYTHON_SUPPRESSIONS)
        prefix = [
            "valgrind",
            "--quiet",
            f"--suppressions={suppressions}",
            "--error-exitcode=99",
            "--leak-check=no",
            "--track-origins=yes",
            "--exit-on-first-error=yes",
        ]
        tool = "valgrind memcheck"
    print(f"sanitizer: {tool}; {args.cases} cases from seed {args.seed}, per-case timeout {args.timeout}s")
    failures_dir = Path(args.failures)
    counts: dict[str, int] = {}
    failures: list[str] = []
    kinds: dict[str, int] = {}
    next_index, end = args.start, args.start + args.cases
    started = time.perf_counter()
    while next_index < end:
        command = [
            *prefix,
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            "--corpus-dir",
            str(corpus_dir),
            "--seed",
            str(args.seed),
            "--start",
            str(next_index),
            "--cases",
            str(end - next_index),
        ]
        if ext:
            command += ["--ext", ext]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ)
        current, pending, hung = None, b"", False
        deadline = time.monotonic() + args.timeout + args.startup
        while True:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                hung = True
                proc.kill()
                break
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                word, index, *rest = line.decode().split(" ", 2)
                if word == "start":
                    current = int(index)
                    deadline = time.monotonic() + args.timeout
                    continue
                current = None
                next_index = int(index) + 1
                outcome = rest[0]
                if outcome.startswith("FAIL"):
                    failures.append(f"case {index}: {outcome}")
                    _save(failures_dir, corpus, args.seed, int(index))
                    counts["fail"] = counts.get("fail", 0) + 1
                else:
                    counts[outcome] = counts.get(outcome, 0) + 1
                    kind = make_case(corpus, args.seed, int(index))[0].split("/")[1]
                    kinds[kind] = kinds.get(kind, 0) + 1
                done = sum(counts.values())
                if done % 1000 == 0:
                    print(f"  {done} cases, {time.perf_counter() - started:.0f}s: {counts}", flush=True)
        stderr = proc.stderr.read().decode(errors="replace")
        returncode = proc.wait()
        if current is not None:  # the worker died or hung inside a case
            what = "hang" if hung else f"crash (exit {returncode})"
            failures.append(f"case {current}: {what}; {make_case(corpus, args.seed, current)[0]}\n{stderr[-4000:]}")
            _save(failures_dir, corpus, args.seed, current)
            counts["fail"] = counts.get("fail", 0) + 1
            next_index = current + 1
        elif returncode != 0:
            failures.append(f"worker exit {returncode} after case {next_index - 1}\n{stderr[-4000:]}")
            counts["fail"] = counts.get("fail", 0) + 1
            if next_index < end and hung:
                next_index += 1
        elif stderr.strip():
            print(f"worker stderr:\n{stderr[-2000:]}")
    elapsed = time.perf_counter() - started
    print(f"finished {sum(counts.values())} cases in {elapsed:.0f}s: {counts}")
    print(f"damage kinds: {kinds}")
    for failure in failures:
        print("FAILURE", failure)
    if failures:
        print(f"damaged inputs saved under {failures_dir}/")
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failures else 0


def _save(folder: Path, corpus, seed: int, index: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    name, data, _ = make_case(corpus, seed, index)
    (folder / f"case{index}_{name.replace('/', '_')}.jpg").write_bytes(data)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0, help="first case index (replay: --start i --cases 1)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds one case may take")
    parser.add_argument("--startup", type=float, default=60.0, help="extra seconds for a worker to start")
    parser.add_argument("--asan", action="store_true", help="build and use an AddressSanitizer copy")
    parser.add_argument("--valgrind", action="store_true", help="run the workers under valgrind memcheck")
    parser.add_argument("--ext", help="path of the extension .so to fuzz (default: the in-tree build)")
    parser.add_argument("--small", action="store_true", help="a corpus of smaller images")
    parser.add_argument(
        "--restart",
        action="store_true",
        help="only restart-interval transcodes (jpegtran), whose crops decode from their intervals",
    )
    parser.add_argument(
        "--failures",
        default=str(Path(tempfile.gettempdir()) / "fuzz_jpeg_failures"),
        help="where damaged inputs that fail are saved",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--corpus-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args)
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
