#!/usr/bin/env python
"""Compare fastdata with PIL on a corpus of real-world and generated images; print the table.

For every file, PIL's ``Image.open(f).convert("RGB")`` is the reference (what torchvision's
ImageFolder trains on). fastdata must accept (pack) and decode to the same pixels every file PIL
decodes; the table counts, per source and format, the files where it does not, and lists each
with the reason. Nothing is downloaded. The corpus is:

- ``generated``: files written with PIL in every mode and format it writes, plus hand-made
  ones (``tools/odd_images.py``: bitfield BMPs, 2/4-bit, float and alpha TIFFs, an APNG whose
  default image is not in the animation, JPEGs with junk between markers, small "bombs").
- ``installed``: the images that installed packages ship (matplotlib's ``mpl-data``,
  scikit-image's ``skimage/data`` and pygame's examples when installed, CPython's
  ``test/imghdrdata`` and ``idlelib/Icons``).
- ``--wheel FILE`` (repeatable): the images inside a wheel, e.g. one fetched with
  ``pip download --no-deps scikit-image``, without installing it.
- ``--dir DIR`` (repeatable): any folder of images.
- ``--jpeg-fuzz N``: N random corruptions of small JPEGs (baseline, progressive, grey, CMYK,
  restart markers), to compare which damaged files each accepts and what pixels they give.

Only files with an ImageFolder extension (``.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp``)
or ``.gif .pbm .pnm`` are read. Usage: ``python tools/pil_parity.py [--wheel W] [--dir D] [-v]``;
the exit status is 1 when some file PIL decodes is skipped or decoded differently.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import sys
import sysconfig
import warnings
import zipfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import odd_images  # noqa: E402

from fastdata.decode import DecodeError, get_decoder  # noqa: E402
from fastdata.decode.capture import codec_messages  # noqa: E402
from fastdata.decode.headers import image_format  # noqa: E402

EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif", ".pbm", ".pnm")
OUTCOMES = ("equal", "skipped", "differs", "fastdata only", "both refuse")


@dataclass
class Result:
    """How fastdata and PIL handled one file."""

    source: str
    name: str
    format: str
    outcome: str
    detail: str = ""
    printed: list[str] = field(default_factory=list)  # what C libraries printed while fastdata handled the file


def pil_reference(data: bytes) -> tuple[np.ndarray | None, str]:
    """PIL's ``convert("RGB")`` pixels, or None and PIL's reason."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as image:
                return np.asarray(image.convert("RGB")), ""
    except Exception as exc:  # noqa: BLE001 - any failure means "PIL does not decode it"
        return None, f"{type(exc).__name__}: {exc}"


def compare(source: str, name: str, data: bytes, decoder_name: str) -> Result:
    """Run ``validate`` (pack's acceptance) and ``decode`` of one decoder and compare with PIL."""
    reference, pil_reason = pil_reference(data)
    decoder = get_decoder(decoder_name)
    with codec_messages() as printed, warnings.catch_warnings():  # the inner block takes the Python warnings
        warnings.simplefilter("ignore")
        try:
            size = decoder.validate(data)
            out = decoder.decode(data)
            reason = ""
        except DecodeError as exc:
            size, out, reason = None, None, str(exc)
    kind = image_format(data)
    if reference is None:
        outcome = "both refuse" if out is None else "fastdata only"
        return Result(source, name, kind, outcome, f"PIL: {pil_reason}", printed)
    if out is None:
        return Result(source, name, kind, "skipped", reason, printed)
    if out.shape != reference.shape or size != reference.shape[:2]:
        return Result(source, name, kind, "differs", f"shape {out.shape} vs PIL {reference.shape}", printed)
    mad = float(np.abs(out.astype(np.int16) - reference.astype(np.int16)).mean())
    if mad > 0:
        return Result(source, name, kind, "differs", f"mean abs diff {mad:.3f}", printed)
    return Result(source, name, kind, "equal", "", printed)


def generated() -> Iterator[tuple[str, bytes]]:
    """The files written in ``tools/odd_images.py``."""
    with codec_messages():  # libtiff prints why Pillow cannot write some mode/compression pairs
        corpus = odd_images.pil_mode_corpus()
    yield from sorted(corpus.items())


def fuzzed_jpegs(count: int, seed: int) -> Iterator[tuple[str, bytes]]:
    """``count`` randomly damaged JPEGs (``odd_images.corrupt``)."""
    rng = np.random.default_rng(seed)
    variants = sorted(odd_images.jpeg_variants().items())
    for i in range(count):
        name, data = variants[i % len(variants)]
        yield f"{name}#{i}", odd_images.corrupt(data, rng)


def installed() -> Iterator[tuple[str, bytes]]:
    """Images shipped by installed packages and by CPython itself."""
    folders = []
    for package, sub in (("matplotlib", "mpl-data"), ("skimage", "data"), ("pygame", "examples/data")):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            folders.append(Path(next(iter(spec.submodule_search_locations))) / sub)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    folders += [stdlib / "test" / "imghdrdata", stdlib / "idlelib" / "Icons"]
    for folder in folders:
        yield from folder_files(folder, prefix=f"{folder.parent.name}/{folder.name}")


def folder_files(folder: Path, prefix: str = "") -> Iterator[tuple[str, bytes]]:
    """Every file with an image extension under ``folder``."""
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name.lower().endswith(EXTENSIONS):
            yield f"{prefix or folder.name}/{path.relative_to(folder).as_posix()}", path.read_bytes()


def wheel_files(wheel: Path) -> Iterator[tuple[str, bytes]]:
    """Every file with an image extension inside a wheel (a zip file)."""
    with zipfile.ZipFile(wheel) as archive:
        for name in sorted(archive.namelist()):
            if name.lower().endswith(EXTENSIONS):
                yield f"{wheel.name.split('-')[0]}/{name}", archive.read(name)


def run(sources: dict[str, Iterator[tuple[str, bytes]]], decoders: list[str]) -> list[Result]:
    """Compare every file of every source with each decoder."""
    results = []
    for source, files in sources.items():
        for name, data in files:
            for decoder_name in decoders:
                results.append(compare(f"{source}:{decoder_name}", name, data, decoder_name))
    return results


def table(results: list[Result]) -> str:
    """Counts per source and format, then every file PIL decodes that fastdata skips or decodes differently."""
    rows = Counter((r.source, r.format, r.outcome) for r in results)
    keys = sorted({(r.source, r.format) for r in results})
    header = f"{'source:decoder':<24} {'format':<7} {'files':>5} " + " ".join(f"{o:>13}" for o in OUTCOMES)
    lines = [header, "-" * len(header)]
    for source, kind in keys:
        counts = [rows[(source, kind, o)] for o in OUTCOMES]
        lines.append(f"{source:<24} {kind:<7} {sum(counts):>5} " + " ".join(f"{c:>13}" for c in counts))
    totals = Counter(r.outcome for r in results)
    lines.append(f"{'all':<24} {'':<7} {len(results):>5} " + " ".join(f"{totals[o]:>13}" for o in OUTCOMES))
    bad = [r for r in results if r.outcome in ("skipped", "differs")]
    lines.append("")
    lines.append(f"files PIL decodes that fastdata skips or decodes differently: {len(bad)}")
    lines += [f"  {r.source} {r.name}: {r.outcome} ({r.detail})" for r in bad]
    printed = [(r, line) for r in results for line in r.printed]
    lines.append(f"lines printed by codec libraries while fastdata decoded (kept off the terminal): {len(printed)}")
    lines += [f"  {r.source} {r.name}: {line}" for r, line in printed[:10]]
    lines += [f"  ... and {len(printed) - 10} more"] if len(printed) > 10 else []
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line entry; returns 1 when some file PIL decodes is skipped or decoded differently."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", action="append", type=Path, default=[], help="a folder of images (repeatable)")
    parser.add_argument("--wheel", action="append", type=Path, default=[], help="a wheel to read images from")
    parser.add_argument("--no-generated", action="store_true", help="leave out the generated files")
    parser.add_argument("--no-installed", action="store_true", help="leave out installed packages' images")
    parser.add_argument("--jpeg-fuzz", type=int, default=0, metavar="N", help="add N randomly damaged JPEGs")
    parser.add_argument("--seed", type=int, default=0, help="seed of --jpeg-fuzz (default 0)")
    parser.add_argument("--decoders", default="auto,opencv", help="fastdata decoders to compare (default auto,opencv)")
    parser.add_argument("-v", "--verbose", action="store_true", help="also list what PIL refuses")
    args = parser.parse_args(argv)
    sources: dict[str, Iterator[tuple[str, bytes]]] = {}
    if not args.no_generated:
        sources["generated"] = generated()
    if not args.no_installed:
        sources["installed"] = installed()
    for wheel in args.wheel:
        sources[f"wheel {wheel.name.split('-')[0]}"] = wheel_files(wheel)
    for folder in args.dir:
        sources[f"dir {folder.name}"] = folder_files(folder)
    if args.jpeg_fuzz:
        sources["jpeg fuzz"] = fuzzed_jpegs(args.jpeg_fuzz, args.seed)
    results = run(sources, args.decoders.split(","))
    print(table(results))
    if args.verbose:
        for r in results:
            if r.outcome in ("fastdata only", "both refuse"):
                print(f"  {r.source} {r.name}: {r.outcome} ({r.detail})")
    return 1 if any(r.outcome in ("skipped", "differs") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
