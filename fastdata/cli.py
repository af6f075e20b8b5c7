"""``fastdata pack | repack | merge | inspect | verify | bench``: the command line.

Flags map one to one onto function keywords.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import select
import signal
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fastdata._util.text import escaped
from fastdata._util.version import __version__
from fastdata.packing.command import add_pack_parser, appending_to, parse_size, summary
from fastdata.packing.engines import PartResult

__all__ = ["EXIT_STATUS", "build_parser", "main", "parse_size"]

if TYPE_CHECKING:
    from fastdata.packing.options import PackOptions


EXIT_STATUS = """exit status:
  0    success
  1    damage found (verify)
  2    bad input or refused (usage, missing folder, OUT in use or not fastdata's, --resume mismatch)
  3    no space left on the output's disk: nothing was lost; free space and run again with --resume
  130  interrupted (Ctrl-C); 143 terminated (SIGTERM): run again with --resume to finish a pack
  141  the reader of the output went away (`fastdata inspect DATA | head`): stopped quietly, as coreutils do"""

EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a coreutils program stopped by SIGPIPE


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like a Ctrl-C so that ``pack`` stops the same clean, resumable way."""


def build_parser() -> argparse.ArgumentParser:
    """The ``fastdata`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="fastdata",
        description="Fast image data for PyTorch training.",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fastdata {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more detail")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{pack,repack,merge,inspect,verify,bench}")

    add_pack_parser(sub, EXIT_STATUS, _run_pack)

    p = sub.add_parser("repack", help="rewrite a packed dataset with every JPEG re-coded losslessly for random access")
    p.add_argument("old", help="folder written by `fastdata pack` (read only)")
    p.add_argument("new", help="output folder for the new dataset")
    p.add_argument("--format", choices=["tfrecord", "lmdb"], default=None, help="storage format (default: OLD's)")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="re-coding processes (default and most: the CPUs this process may use)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace the dataset NEW holds")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.set_defaults(run=_run_repack)

    p = sub.add_parser("merge", help="check the parts that `pack --part I/N` wrote into OUT and write its manifest")
    p.add_argument("out", help="the folder every `fastdata pack SRC OUT --part I/N` wrote into")
    p.add_argument(
        "--no-crc",
        dest="check_crc",
        action="store_false",
        help="check shard sizes only, not their CRC32C (which reads every shard)",
    )
    p.add_argument("--allow-empty", action="store_true", help="write a dataset even when every image was skipped")
    p.set_defaults(run=_run_merge)

    p = sub.add_parser("inspect", help="summarize a packed dataset")
    p.add_argument("root", help="folder or URL written by `fastdata pack`")
    p.add_argument("--json", action="store_true", help="print one JSON object (for scripts) instead of text")
    p.set_defaults(run=_run_inspect)

    p = sub.add_parser("verify", help="check every record of a packed dataset (CRC, index, decode)")
    p.add_argument("root", help="folder or URL written by `fastdata pack` (shards are downloaded one at a time)")
    p.add_argument("--no-decode", dest="decode", action="store_false", help="skip decoding the images")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes checking shards side by side (default and most: the CPUs this process may use)",
    )
    p.add_argument(
        "-q", "--quiet", action="store_true", help="no progress bar (there is none when stderr is not a terminal)"
    )
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
    before = appending_to(args)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        manifest = pack(args.src, args.out, options=_pack_options(args))
    except NothingPackedError as exc:
        print(
            f"fastdata: error: nothing was packed: all {len(exc.skipped)} image(s) in {escaped(args.src)} "
            "were skipped:",
            file=sys.stderr,
        )
        for bad in exc.skipped:
            print(f"  {escaped(bad.path)}: {escaped(bad.reason)}", file=sys.stderr)
        print("fix or remove them, or pass --allow-empty to write an empty dataset", file=sys.stderr)
        return 2
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    if isinstance(manifest, PartResult):  # --part: this task's share of a cluster pack
        print(
            f"packed part {manifest.part}/{manifest.parts}: {len(manifest.ranges)} range(s), {manifest.packed} "
            f"packed by this run, {manifest.num_samples} images in {len(manifest.shards)} shard(s) into "
            f"{escaped(args.out)}; "
            f"run `fastdata merge {escaped(args.out)}` once every part is done"
        )
        return 0
    print(summary(args, manifest, before))
    if not manifest.num_samples:
        print("the dataset is empty (--allow-empty): every image was skipped")
    if manifest.skipped:
        print(f"skipped {len(manifest.skipped)} bad file(s):")
        for bad in manifest.skipped:
            print(f"  {escaped(bad.path)}: {escaped(bad.reason)}")
    if manifest.warnings:
        print(
            f"{len(manifest.warnings)} file(s) packed with codec warnings (PIL decodes them too); "
            f"`fastdata inspect {escaped(args.out)}` lists them"
        )
    return 0


def _run_repack(args: argparse.Namespace) -> int:
    from fastdata.packing.repack import repack

    manifest = repack(
        args.old, args.new, format=args.format, workers=args.workers, overwrite=args.overwrite, progress=args.progress
    )
    size = sum(s.nbytes for s in manifest.shards)
    recoded = manifest.transcoded_count or 0
    print(
        f"repacked {manifest.num_samples} images ({recoded} JPEGs re-coded) into {len(manifest.shards)} "
        f"{manifest.format} shard(s), {size / 1e6:.1f} MB, in {escaped(args.new)}"
    )
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
    elif Image.MAX_IMAGE_PIXELS is not None and max_pixels > 2 * Image.MAX_IMAGE_PIXELS:
        Image.MAX_IMAGE_PIXELS = -(-max_pixels // 2)


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM handler for ``pack``: stop like Ctrl-C; a second SIGTERM kills at once."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise Terminated()


def _run_merge(args: argparse.Namespace) -> int:
    from fastdata.packing.merge import merge

    manifest = merge(args.out, check_crc=args.check_crc, allow_empty=args.allow_empty)
    print(
        f"merged {manifest.num_samples} images of {len(manifest.classes)} classes in {len(manifest.shards)} "
        f"{manifest.format} shard(s) into {escaped(args.out)}"
    )
    return 0


def _run_inspect(args: argparse.Namespace) -> int:
    from fastdata.packing.summary import describe, summary

    print(json.dumps(summary(args.root)) if args.json else describe(args.root))
    return 0


def _run_verify(args: argparse.Namespace) -> int:
    from fastdata.packing.check import verify

    report = verify(
        args.root, decode=args.decode, workers=args.workers, progress=not args.quiet and sys.stderr.isatty()
    )
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
    space and ``--resume``), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM), 141 the reader of
    standard output went away (nothing more is printed).
    """
    from fastdata.packing.space import EXIT_NO_SPACE, OutOfSpaceError

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help and --version print, then exit (argparse ignores a failed write)
        if not exc.code and _stdout_gone():
            return _quiet_exit()
        raise
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        code = int(args.run(args) or 0)
        sys.stdout.flush()  # buffered output meets a closed pipe here, not at exit
        return code
    except BrokenPipeError as exc:
        if _stdout_gone():
            return _quiet_exit()
        print(f"fastdata: error: {escaped(exc)}", file=sys.stderr)  # a connection of the command's own, not stdout
        return 2
    except KeyboardInterrupt as exc:
        how = "terminated" if isinstance(exc, Terminated) else "interrupted"
        print(f"fastdata: {how}; run the same command with --resume to finish a pack", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    except OutOfSpaceError as exc:
        print(f"fastdata: error: {escaped(exc)}", file=sys.stderr)
        return EXIT_NO_SPACE
    except (
        FileNotFoundError,
        FileExistsError,
        NotADirectoryError,
        PermissionError,
        ValueError,
        ImportError,
        ConnectionError,
    ) as exc:
        print(f"fastdata: error: {escaped(exc)}", file=sys.stderr)
        return 2


def _stdout_gone() -> bool:
    """Whether standard output is a pipe whose reader has gone.

    Whether standard output is a pipe whose reader has gone (``| head`` read what it wanted); what is buffered is
    flushed first.
    """
    with contextlib.suppress(BrokenPipeError):
        sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # no file descriptor (captured output), or no poll()
        return False


def _quiet_exit() -> int:
    """Stop printing, as a coreutils program stopped by SIGPIPE does.

    What is still buffered goes to /dev/null (not
    to a "Broken pipe" message when Python flushes at exit).
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # pragma: no cover - stdout without a descriptor
        pass
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
