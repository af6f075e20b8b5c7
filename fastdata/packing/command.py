"""``fastdata pack``'s command line: its flags and its summary.

``fastdata pack``'s command line: its flags (one per :class:`~fastdata.packing.options.PackOptions` field, with
their argparse types) and the summary it prints. :mod:`fastdata.cli` adds the subcommand and runs it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from fastdata._util.sizes import parse_size as _parse_size
from fastdata._util.text import escaped
from fastdata.decode.limits import DEFAULT_MAX_PIXELS
from fastdata.formats.manifest import MANIFEST_NAME, Manifest
from fastdata.packing.append import pack_format

__all__ = ["add_pack_parser", "appending_to", "parse_size", "summary"]


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


def add_pack_parser(sub: argparse._SubParsersAction, epilog: str, run: Callable[[argparse.Namespace], int]) -> None:
    """Add ``fastdata pack`` to the subcommands ``sub``; ``epilog``: the exit statuses; ``run``: what runs it."""
    p = sub.add_parser(
        "pack",
        help="pack images into shards: an ImageFolder tree, a CSV/JSONL/Parquet list, Hugging "
        "Face Parquet, WebDataset tars, TFRecords or another pack",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "src",
        help="what to pack: an ImageFolder tree, a .csv/.jsonl/.parquet file list, Parquet files "
        "(Hugging Face layout: a file, folder or glob), WebDataset tars (shard-{000000..000009}.tar), a "
        "fastdata pack or TFRecord files",
    )
    p.add_argument(
        "out",
        help="output folder for shards, index files and manifest.json, or a URL "
        "(s3://bucket/x, gs://...): shards are uploaded as they complete, manifest.json last",
    )
    p.add_argument(
        "--format",
        default=None,
        choices=["tfrecord", "lmdb"],
        help="storage format (required; with --append, the pack's own by default)",
    )
    p.add_argument("--shard-size", type=parse_size, default=256 * 2**20, help="max bytes per shard (default 256MiB)")
    p.add_argument("--samples-per-shard", type=_positive_int, default=None, help="max records per shard")
    p.add_argument(
        "--max-side",
        type=_positive_int,
        default=None,
        help="downscale so the longer side is at most N px and re-encode as JPEG (default: store bytes unchanged)",
    )
    p.add_argument(
        "--keep-bytes",
        action="store_true",
        help="store every source file byte for byte (default: re-code each JPEG losslessly, same pixels, "
        "with restart intervals so crops decode faster; EXIF, ICC and comments are dropped)",
    )
    p.add_argument("--quality", type=int, default=90, help="JPEG quality for --max-side re-encoding (default 90)")
    p.add_argument("--shuffle-seed", type=int, default=None, help="pre-shuffle the sample order with this seed")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="decode/validate processes (default and most: the CPUs this process may use)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="fail on the first bad image, unreadable folder, symlink loop or non-UTF-8 name instead of "
        "skipping and listing it",
    )
    p.add_argument(
        "--max-pixels",
        type=_pixel_limit,
        default=DEFAULT_MAX_PIXELS,
        help="skip images whose header declares more pixels than this, before decoding them "
        f"(default {DEFAULT_MAX_PIXELS}, PIL's decompression-bomb limit; 0: no limit)",
    )
    p.add_argument(
        "--allow-empty",
        action="store_true",
        help="write a dataset even when every image was skipped (default: exit with an error)",
    )
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--resume",
        action="store_true",
        help="finish an interrupted pack in OUT (same SRC and options, or it is refused)",
    )
    group.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the dataset OUT holds, or pack into a non-empty folder; only fastdata's own "
        "files are ever deleted",
    )
    p.add_argument(
        "--append",
        action="store_true",
        help="add SRC's samples to the finished pack in OUT as new shards (new manifest written last), "
        "with the pack's own options (--format may be left out); with --resume, finish an "
        "interrupted append",
    )
    p.add_argument(
        "--allow-duplicates",
        action="store_true",
        help="with --append: add SRC even when the pack already holds its samples (the same files, "
        "labels and order as the pack itself or an earlier append; refused by default)",
    )
    p.add_argument(
        "--source",
        default="auto",
        choices=["auto", "imagefolder", "list", "parquet", "webdataset", "pack", "tfrecord"],
        help="the kind of SRC (default: told by what SRC is)",
    )
    p.add_argument(
        "--label-column",
        default=None,
        help="column (or .json key) with the label: class names map to indices in sorted order, integers "
        "are kept, a mix of the two is refused (default: label; a source without one is refused "
        "unless --unlabelled)",
    )
    p.add_argument(
        "--labels",
        choices=["auto", "names"],
        default="auto",
        help="auto: integer labels are kept, class names sorted, a mix refused naming the first row of "
        "the other kind (default); names: every label is a class name, integers included, sorted "
        "as text",
    )
    p.add_argument(
        "--unlabelled",
        action="store_true",
        help="pack a list, Parquet or tars without labels: every label is -1 and the class list empty "
        "(default: a source without a label column is refused)",
    )
    p.add_argument(
        "--image-column",
        default=None,
        help="column with the image path/URL (lists; default: path, file, filename, image or url) or the "
        "{bytes, path} image struct (Parquet; default: the first such column)",
    )
    p.add_argument(
        "--fields",
        type=_names,
        default=(),
        help="comma-separated columns (.json keys, TFRecord features) to keep with each sample, e.g. "
        "boxes,labels (a pack source keeps all its fields by default)",
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.add_argument(
        "--range-size",
        type=_positive_int,
        default=None,
        help="samples per range of the plan (default 10000, rounded up to a multiple of "
        "--samples-per-shard): one task each; shards never cross a range end",
    )
    p.add_argument(
        "--engine",
        choices=["local", "ray"],
        default="local",
        help="local: this machine's process pool (default); ray: one Ray task per range",
    )
    p.add_argument(
        "--ray-address", default=None, help="Ray cluster for --engine ray (default: RAY_ADDRESS, else a local Ray)"
    )
    p.add_argument(
        "--part",
        type=_part,
        default=None,
        metavar="I/N",
        help="pack only part I of N (0-based; e.g. $SLURM_ARRAY_TASK_ID/16) and write its partial "
        "manifest; `fastdata merge OUT` finishes once every part is done",
    )
    p.set_defaults(run=run)


def appending_to(args: argparse.Namespace) -> Manifest | None:
    """The manifest an ``--append`` adds to, or None.

    The manifest an ``--append`` adds to (for its summary), ``args.format`` filled in with the pack's own when
    ``--format`` is left out; None for a pack that is not an append.

    Raises:
        ValueError: ``--format`` is left out of a pack that is not an append.
        FileNotFoundError: ``--append`` without ``--format`` to a folder that holds no finished pack.
    """
    if args.format is None:
        if not args.append:
            raise ValueError("--format is required: tfrecord or lmdb (an --append takes the pack's own)")
        args.format = pack_format(args.out)
    if not args.append or not (Path(args.out) / MANIFEST_NAME).is_file():
        return None
    return Manifest.load(args.out)


def summary(args: argparse.Namespace, manifest: Manifest, before: Manifest | None) -> str:
    """The line ``fastdata pack`` prints once ``manifest`` is written (``before``: the manifest an append added to)."""
    size = sum(s.nbytes for s in manifest.shards)
    classes = (
        "without labels (--unlabelled: every label -1)"
        if manifest.unlabelled
        else f"of {len(manifest.classes)} classes"
    )
    if before is not None:
        return (
            f"added {manifest.num_samples - before.num_samples} (now {manifest.num_samples}) images {classes} in "
            f"{len(manifest.shards) - len(before.shards)} new {manifest.format} shard(s), {size / 1e6:.1f} MB in "
            f"all, to {escaped(args.out)}"
        )
    return (
        f"packed {manifest.num_samples} images {classes} into {len(manifest.shards)} {manifest.format} shard(s), "
        f"{size / 1e6:.1f} MB, in {escaped(args.out)}"
    )
