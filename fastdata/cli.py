"""``fastdata pack | repack | merge | inspect | verify | bench``: the command line. Flags map one to one onto function keywords."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fastdata import __version__
from fastdata._util.sizes import parse_size as _parse_size
from fastdata._util.text import escaped
from fastdata.decode.limits import DEFAULT_MAX_PIXELS

if TYPE_CHECKING:
    from fastdata.packing.options import PackOptions


def parse_size(text: str) -> int:
    """``"256MB"`` → 256000000, ``"1GiB"`` → 1073741824, ``"4096"`` → 4096 (an argparse type)."""
    try:
        return _parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _pixel_limit(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of pixels (0: no limit), got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of pixels (0: no limit), got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _part(text: str) -> tuple[int, int]:
    from fastdata.packing.plan import parse_part

    try:
        return parse_part(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


EXIT_STATUS = """exit status:
  0    success
  1    damage found (verify)
  2    bad input or refused (usage, missing folder, OUT in use or not fastdata's, --resume mismatch)
  3    no space left on the output's disk: nothing was lost; free space and run again with --resume
  130  interrupted (Ctrl-C); 143 terminated (SIGTERM): run again with --resume to finish a pack"""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like a Ctrl-C so that ``pack`` stops the same clean, resumable way."""


def build_parser() -> argparse.ArgumentParser:
    """The ``fastdata`` argument parser."""
    parser = argparse.ArgumentParser(prog="fastdata", description="Fast image data for PyTorch training.",
                                     epilog=EXIT_STATUS, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"fastdata {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more detail")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{pack,repack,merge,inspect,verify,bench}")

    p = sub.add_parser("pack", help="pack an image folder (one subfolder per class) into shards",
                       epilog=EXIT_STATUS, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", help="what to pack: an ImageFolder tree, a .csv/.jsonl/.parquet file list, Parquet files "
                   "(Hugging Face layout: a file, folder or glob), WebDataset tars (shard-{000000..000009}.tar), a "
                   "fastdata pack or TFRecord files")
    p.add_argument("out", help="output folder for shards, index files and manifest.json, or a URL "
                   "(s3://bucket/x, gs://...): shards are uploaded as they complete, manifest.json last")
    p.add_argument("--format", required=True, choices=["tfrecord", "lmdb"], help="storage format")
    p.add_argument("--shard-size", type=parse_size, default=256 * 2**20, help="max bytes per shard (default 256MiB)")
    p.add_argument("--samples-per-shard", type=_positive_int, default=None, help="max records per shard")
    p.add_argument("--max-side", type=_positive_int, default=None,
                   help="downscale so the longer side is at most N px and re-encode as JPEG (default: store bytes unchanged)")
    p.add_argument("--keep-bytes", action="store_true",
                   help="store every source file byte for byte (default: re-code each JPEG losslessly, same pixels, "
                        "with restart intervals so crops decode faster; EXIF, ICC and comments are dropped)")
    p.add_argument("--quality", type=int, default=90, help="JPEG quality for --max-side re-encoding (default 90)")
    p.add_argument("--shuffle-seed", type=int, default=None, help="pre-shuffle the sample order with this seed")
    p.add_argument("--workers", type=int, default=None,
                   help="decode/validate processes (default and most: the CPUs this process may use)")
    p.add_argument("--strict", action="store_true",
                   help="fail on the first bad image, unreadable folder, symlink loop or non-UTF-8 name instead of "
                        "skipping and listing it")
    p.add_argument("--max-pixels", type=_pixel_limit, default=DEFAULT_MAX_PIXELS,
                   help="skip images whose header declares more pixels than this, before decoding them "
                        f"(default {DEFAULT_MAX_PIXELS}, PIL's decompression-bomb limit; 0: no limit)")
    p.add_argument("--allow-empty", action="store_true",
                   help="write a dataset even when every image was skipped (default: exit with an error)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--resume", action="store_true",
                       help="finish an interrupted pack in OUT (same SRC and options, or it is refused)")
    group.add_argument("--overwrite", action="store_true",
                       help="replace the dataset OUT holds, or pack into a non-empty folder; only fastdata's own "
                            "files are ever deleted")
    p.add_argument("--append", action="store_true",
                   help="add SRC's samples to the finished pack in OUT as new shards (new manifest written last), "
                        "with the pack's own options; with --resume, finish an interrupted append")
    p.add_argument("--source", default="auto",
                   choices=["auto", "imagefolder", "list", "parquet", "webdataset", "pack", "tfrecord"],
                   help="the kind of SRC (default: told by what SRC is)")
    p.add_argument("--label-column", default=None,
                   help="column (or .json key) with the label: class names map to indices in sorted order, integers "
                        "are kept (default: label; without one, every label is 0)")
    p.add_argument("--image-column", default=None,
                   help="column with the image path/URL (lists; default: path, file, filename, image or url) or the "
                        "{bytes, path} image struct (Parquet; default: the first such column)")
    p.add_argument("--fields", type=_names, default=(),
                   help="comma-separated columns (.json keys, TFRecord features) to keep with each sample, e.g. "
                        "boxes,labels (a pack source keeps all its fields by default)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.add_argument("--range-size", type=_positive_int, default=None,
                   help="samples per range of the plan (default 10000, rounded up to a multiple of "
                        "--samples-per-shard): one task each; shards never cross a range end")
    p.add_argument("--engine", choices=["local", "ray"], default="local",
                   help="local: this machine's process pool (default); ray: one Ray task per range")
    p.add_argument("--ray-address", default=None, help="Ray cluster for --engine ray (default: RAY_ADDRESS, "
                   "else a local Ray)")
    p.add_argument("--part", type=_part, default=None, metavar="I/N",
                   help="pack only part I of N (0-based; e.g. $SLURM_ARRAY_TASK_ID/16) and write its partial "
                        "manifest; `fastdata merge OUT` finishes once every part is done")
    p.set_defaults(run=_run_pack)

    p = sub.add_parser("repack", help="rewrite a packed dataset with every JPEG re-coded losslessly for random access")
    p.add_argument("old", help="folder written by `fastdata pack` (read only)")
    p.add_argument("new", help="output folder for the new dataset")
    p.add_argument("--format", choices=["tfrecord", "lmdb"], default=None, help="storage format (default: OLD's)")
    p.add_argument("--workers", type=int, default=None,
                   help="re-coding processes (default and most: the CPUs this process may use)")
    p.add_argument("--overwrite", action="store_true", help="replace the dataset NEW holds")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.set_defaults(run=_run_repack)

    p = sub.add_parser("merge", help="check the parts that `pack --part I/N` wrote into OUT and write its manifest")
    p.add_argument("out", help="the folder every `fastdata pack SRC OUT --part I/N` wrote into")
    p.add_argument("--no-crc", dest="check_crc", action="store_false",
                   help="check shard sizes only, not their CRC32C (which reads every shard)")
    p.add_argument("--allow-empty", action="store_true", help="write a dataset even when every image was skipped")
    p.set_defaults(run=_run_merge)

    p = sub.add_parser("inspect", help="summarize a packed dataset")
    p.add_argument("root", help="folder or URL written by `fastdata pack`")
    p.add_argument("--json", action="store_true", help="print one JSON object (for scripts) instead of text")
    p.set_defaults(run=_run_inspect)

    p = sub.add_parser("verify", help="check every record of a packed dataset (CRC, index, decode)")
    p.add_argument("root", help="folder or URL written by `fastdata pack` (shards are downloaded one at a time)")
    p.add_argument("--no-decode", dest="decode", action="store_false", help="skip decoding the images")
    p.add_argument("--workers", type=int, default=None,
                   help="processes checking shards side by side (default and most: the CPUs this process may use)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar (there is none when stderr is not a "
                   "terminal)")
    p.set_defaults(run=_run_verify)

    try:
        from fastdata.bench.cli import add_bench_parser
    except ImportError:  # pragma: no cover - the benchmark ships with the package
        pass
    else:
        add_bench_parser(sub)
    return parser


def _run_pack(args: argparse.Namespace) -> int:
    from fastdata.packing.packer import NothingPackedError, pack

    _match_pillow_limit(args.max_pixels)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        manifest = pack(args.src, args.out, options=_pack_options(args))
    except NothingPackedError as exc:
        print(f"fastdata: error: nothing was packed: all {len(exc.skipped)} image(s) in {escaped(args.src)} "
              "were skipped:", file=sys.stderr)
        for bad in exc.skipped:
            print(f"  {escaped(bad.path)}: {escaped(bad.reason)}", file=sys.stderr)
        print("fix or remove them, or pass --allow-empty to write an empty dataset", file=sys.stderr)
        return 2
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    if args.part is not None:
        print(f"packed part {manifest.part}/{manifest.parts}: {len(manifest.ranges)} range(s), {manifest.packed} "
              f"packed by this run, {manifest.num_samples} images in {len(manifest.shards)} shard(s) into "
              f"{escaped(args.out)}; "
              f"run `fastdata merge {escaped(args.out)}` once every part is done")
        return 0
    size = sum(s.nbytes for s in manifest.shards)
    print(f"packed {manifest.num_samples} images of {len(manifest.classes)} classes into "
          f"{len(manifest.shards)} {manifest.format} shard(s), {size / 1e6:.1f} MB, in {escaped(args.out)}")
    if not manifest.num_samples:
        print("the dataset is empty (--allow-empty): every image was skipped")
    if manifest.skipped:
        print(f"skipped {len(manifest.skipped)} bad file(s):")
        for bad in manifest.skipped:
            print(f"  {escaped(bad.path)}: {escaped(bad.reason)}")
    if manifest.warnings:
        print(f"{len(manifest.warnings)} file(s) packed with codec warnings (PIL decodes them too); "
              f"`fastdata inspect {escaped(args.out)}` lists them")
    return 0


def _run_repack(args: argparse.Namespace) -> int:
    from fastdata.packing.repack import repack

    manifest = repack(args.old, args.new, format=args.format, workers=args.workers, overwrite=args.overwrite,
                      progress=args.progress)
    size = sum(s.nbytes for s in manifest.shards)
    recoded = manifest.transcoded_count or 0
    print(f"repacked {manifest.num_samples} images ({recoded} JPEGs re-coded) into {len(manifest.shards)} "
          f"{manifest.format} shard(s), {size / 1e6:.1f} MB, in {escaped(args.new)}")
    return 0


def _pack_options(args: argparse.Namespace) -> PackOptions:
    """The pack's options from its flags (one flag per field of :class:`PackOptions`)."""
    from fastdata.packing.options import PackOptions

    names = [f.name for f in dataclasses.fields(PackOptions)]
    return PackOptions(**{name: getattr(args, name) for name in names if hasattr(args, name)})


def _match_pillow_limit(max_pixels: int) -> None:
    """Let Pillow decode what ``--max-pixels`` allows: its own limit is checked again when a TIFF is loaded."""
    from PIL import Image

    if not max_pixels:
        Image.MAX_IMAGE_PIXELS = None
    elif Image.MAX_IMAGE_PIXELS is not None and 2 * Image.MAX_IMAGE_PIXELS < max_pixels:
        Image.MAX_IMAGE_PIXELS = -(-max_pixels // 2)


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM handler for ``pack``: stop like Ctrl-C; a second SIGTERM kills at once."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise Terminated()


def _run_merge(args: argparse.Namespace) -> int:
    from fastdata.packing.merge import merge

    manifest = merge(args.out, check_crc=args.check_crc, allow_empty=args.allow_empty)
    print(f"merged {manifest.num_samples} images of {len(manifest.classes)} classes in {len(manifest.shards)} "
          f"{manifest.format} shard(s) into {escaped(args.out)}")
    return 0


def _run_inspect(args: argparse.Namespace) -> int:
    from fastdata.packing.summary import describe, summary

    print(json.dumps(summary(args.root)) if args.json else describe(args.root))
    return 0


def _run_verify(args: argparse.Namespace) -> int:
    from fastdata.packing.check import verify

    report = verify(args.root, decode=args.decode, workers=args.workers,
                    progress=not args.quiet and sys.stderr.isatty())
    for problem in report.problems:
        print(f"DAMAGED {escaped(problem)}")
    if report.ok:
        print(f"OK: {report.records} records checked in {escaped(args.root)}")
        return 0
    print(f"{len(report.problems)} problem(s) in {escaped(args.root)}", file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (see :data:`EXIT_STATUS`).

    0 success, 1 damage found, 2 bad input or refused, 3 no space left (nothing lost: free
    space and ``--resume``), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
    """
    from fastdata.packing.space import EXIT_NO_SPACE, OutOfSpaceError

    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt as exc:
        how = "terminated" if isinstance(exc, Terminated) else "interrupted"
        print(f"fastdata: {how}; run the same command with --resume to finish a pack", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    except OutOfSpaceError as exc:
        print(f"fastdata: error: {escaped(exc)}", file=sys.stderr)
        return EXIT_NO_SPACE
    except (FileNotFoundError, FileExistsError, NotADirectoryError, PermissionError, ValueError, ImportError,
            ConnectionError) as exc:
        print(f"fastdata: error: {escaped(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
