"""``fastdata bench DATA ...``: the benchmark's command line; its flags mirror :func:`run_benchmark`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from fastdata.bench import report
from fastdata.bench.peers import PEERS
from fastdata.bench.peers.harness import format_peer_table
from fastdata.bench.pipelines import PIPELINES
from fastdata.bench.runner import run_benchmark

__all__ = ["add_bench_parser"]


def _int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}")
        return value

    return parse


def add_bench_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``fastdata bench DATA ...`` on the CLI's subparsers; its flags mirror :func:`run_benchmark`."""
    p = subparsers.add_parser(
        "bench",
        help="compare loader throughput: fastdata vs torch-pil, torch-cv2, DALI, and "
        f"with --peers other loaders ({', '.join(PEERS)})",
    )
    p.add_argument("data", help="image folder (one subfolder per class)")
    p.add_argument(
        "--pipelines",
        nargs="+",
        choices=PIPELINES,
        default=None,
        metavar="NAME",
        help=f"pipelines to measure (default: all of {', '.join(PIPELINES)})",
    )
    p.add_argument("--batch-size", type=_int_at_least(1), default=256, help="images per batch (default 256)")
    p.add_argument("--workers", type=_int_at_least(0), default=None, help="DataLoader workers (default: all cores)")
    window = p.add_mutually_exclusive_group()
    window.add_argument("--batches", type=_int_at_least(1), default=None, help="timed batches per run")
    window.add_argument("--epochs", type=_int_at_least(1), default=1, help="whole passes per run (default 1)")
    p.add_argument(
        "--warmup-batches",
        dest="warmup",
        type=_int_at_least(0),
        default=None,
        help="batches of each run left out of its timing (default: one per worker); with --epochs 2 and "
        "a pass of warm-up, the steady state of training",
    )
    p.add_argument("--repeats", type=_int_at_least(1), default=3, help="runs per pipeline, round-robin (default 3)")
    p.add_argument("--cache", default=None, help="folder for the packed shards (default: DATA.fastdata-cache)")
    p.add_argument(
        "--cold",
        dest="warm",
        action="store_false",
        help="drop the input files from the page cache before each run (default: pre-read them)",
    )
    p.add_argument("--size", type=_int_at_least(1), default=224, help="crop size (default 224)")
    p.add_argument(
        "--breakdown-samples",
        type=_int_at_least(0),
        default=500,
        help="images timed stage by stage (default 500; 0: no breakdown)",
    )
    p.add_argument(
        "--breakdown",
        action="store_true",
        help="count every stage's CPU time inside fastdata's loader runs (workers and main process); "
        "printed per image, adding up to the measured time",
    )
    p.add_argument(
        "--no-isolate",
        dest="isolate",
        action="store_false",
        help="run the measurements in this process instead of a fresh process each",
    )
    p.add_argument(
        "--peers",
        nargs="*",
        choices=list(PEERS),
        default=None,
        metavar="PEER",
        help=f"also measure the loaders users pick instead, each converted by its own writer (alone: "
        f"all of {', '.join(PEERS)}; needs the `peers` extra, a missing one is reported)",
    )
    p.add_argument("--json", default=None, help="write all results to this JSON file")
    p.add_argument("--plot", default=None, help="draw a PNG bar chart here (needs matplotlib)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress output")
    p.set_defaults(run=_run_bench)
    return p


def _run_bench(args: argparse.Namespace) -> int:
    results = run_benchmark(
        args.data,
        pipelines=args.pipelines,
        batch_size=args.batch_size,
        workers=args.workers,
        batches=args.batches,
        epochs=args.epochs,
        repeats=args.repeats,
        cache=args.cache,
        warm=args.warm,
        size=args.size,
        breakdown_samples=args.breakdown_samples,
        isolate=args.isolate,
        progress=args.progress,
        peers=list(PEERS) if args.peers == [] else (args.peers or ()),
        breakdown=args.breakdown,
        warmup=args.warmup,
    )
    print(report.format_report(results))
    if results.get("peers"):
        print("\npeers (each converted by its own writer; same work per image; uint8 batches):")
        print(format_peer_table(results))
    if args.json:
        print(f"results written to {report.write_json(results, args.json)}")
    if args.plot:
        path = report.plot_results(results, args.plot)
        print(f"chart written to {path}" if path else f"note: {report.MATPLOTLIB_HINT}")
    peers = set(results.get("peers", {}).get("names", []))  # a failing peer is reported, not fastdata's failure
    failed = [n for n, e in results["pipelines"].items() if e["status"] == "failed" and n not in peers]
    return 1 if failed else 0
