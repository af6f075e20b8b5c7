#!/usr/bin/env python
"""Issue 29's numbers in one command: the loader at its kernel's bound, on a quiet 2-core machine.

Makes ``data/imagenet-like-3000`` if it is missing, then runs, one after the other (about 15 minutes):

1. the loaders, steady state: ``fastdata bench`` over 2 passes with the first pass as warm-up (workers started,
   fastdata's shared-memory buffers reused), torch-pil, the careful torch-cv2, fastdata's float and uint8 loaders
   with worker processes and with ``worker_mode="thread"``, both kernel bounds, the torchcodec peer,
   ``--breakdown`` -> ``bench/results/headline.json`` / ``.png``;
2. the same on the issue's first protocol (one pass per run, one warm-up batch per worker) -> ``...-one-pass.json``;
3. the breakdown before this issue's changes: the same run as 1. in a temporary git worktree of the commit that
   added the counters alone (subject "Loader breakdown, the counters alone"), its C kernels built there
   -> ``bench/results/headline-before.json``;
4. the DCT scales between the powers of two, one core (``bench/kernel.py scales``) ->
``bench/results/kernel-scales.json``; 5. the per-sample path against the batch path, one core (``bench/kernel.py
per-sample``) -> ``bench/results/kernel-per-sample.json``.

Then it prints the tables for ``bench/README.md``'s "Issue 29" section and the issue's goals, met or not (the goals
live here, in the project's own check, never in ``fastdata bench``'s table), each unmet one with the breakdown's
largest stage outside the kernel.

Usage::

    python bench/loaders.py headline                 # everything
    python bench/loaders.py headline --skip-before   # without the worktree of the old data path
    python bench/loaders.py headline --report-only   # print the tables from the JSON files of an earlier run
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
BEFORE_SUBJECT = "Loader breakdown, the counters alone"
PIPELINES = [
    "torch-pil",
    "torch-cv2",
    "fastdata-tfrecord",
    "fastdata-thread",
    "fastdata-uint8",
    "fastdata-uint8-thread",
    "decode-bound",
    "decode-bound-cv2",
]
#: (pipeline, baseline, at least): the issue's goals. Checked here only.
GOALS = (
    ("fastdata-uint8", "decode-bound", 0.90),
    ("fastdata-uint8", "torch-cv2", 2.0),
    ("fastdata-tfrecord", "torch-pil", 3.0),
)


def _run(argv: list[str], cwd: Path = ROOT) -> None:
    print("$", " ".join(argv), flush=True)
    subprocess.run(argv, cwd=cwd, check=True)


def _bench(
    data: Path, out: Path, *, steady: bool, cwd: Path = ROOT, pipelines: list[str] = PIPELINES, extra: list[str] = ()
) -> None:
    data = data.resolve()  # the worktree of step 3 runs elsewhere
    protocol = ["--epochs", "2", "--warmup-batches", "12"] if steady else ["--epochs", "1"]
    _run(
        [
            sys.executable,
            "-m",
            "fastdata.cli",
            "bench",
            str(data),
            "--pipelines",
            *pipelines,
            "--batch-size",
            "256",
            "--workers",
            "2",
            "--repeats",
            "3",
            *protocol,
            "--breakdown",
            "--breakdown-samples",
            "300",
            "--cache",
            str(data.parent / f"{data.name}.fastdata-cache"),
            "--json",
            str(out),
            "--plot",
            str(out.with_suffix(".png")),
            "--no-progress",
            *extra,
        ],
        cwd=cwd,
    )


def _before_commit() -> str | None:
    found = subprocess.run(
        ["git", "log", "--format=%H", f"--grep=^{BEFORE_SUBJECT}"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    return found[0] if found else None


def _before(data: Path, out: Path) -> None:
    commit = _before_commit()
    if commit is None:
        print(f"no commit '{BEFORE_SUBJECT}' in this history (squashed?): no 'before' breakdown", flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="fastdata-before-") as tmp:
        tree = Path(tmp) / "tree"
        _run(["git", "worktree", "add", "--detach", str(tree), commit])
        try:
            _run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tree)
            _bench(data, out, steady=True, cwd=tree, pipelines=["fastdata-tfrecord", "fastdata-uint8", "decode-bound"])
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)


def _rate(results: dict, name: str) -> float | None:
    return results["pipelines"].get(name, {}).get("images_per_s", {}).get("median")


def _loader_table(results: dict) -> list[str]:
    rows = [
        "| pipeline | output | images/s median [min–max] | × torch-pil | × torch-cv2 | of its bound | flags |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    pil, cv2 = _rate(results, "torch-pil"), _rate(results, "torch-cv2")
    for name, entry in results["pipelines"].items():
        if entry.get("status") != "ok":
            rows.append(f"| {name} | {entry.get('status')}: {entry.get('note', '')} | | | | | |")
            continue
        ips, own = entry["images_per_s"], entry.get("fraction_of_own_bound")
        cells = [
            name,
            entry.get("output_summary", ""),
            f"{ips['median']:.0f} [{ips['min']:.0f}–{ips['max']:.0f}]",
            f"{ips['median'] / pil:.2f}×" if pil else "",
            f"{ips['median'] / cv2:.2f}×" if cv2 else "",
            f"{100 * own:.0f}%" if own else "",
            "; ".join(entry.get("flags", [])),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _breakdown_table(after: dict, before: dict | None) -> list[str]:
    from fastdata.bench.loader_breakdown import GROUPS, LABELS

    names = [
        n for n in ("fastdata-uint8", "fastdata-tfrecord") if after["pipelines"].get(n, {}).get("loader_breakdown")
    ]
    if not names:
        return ["(no breakdown: no run had a timed window; too few batches)"]
    head = (
        "| stage (core-µs per image) | " + " | ".join(f"{n} before | {n} after" if before else n for n in names) + " |"
    )
    rows = [head, "| --- |" + " --- |" * (len(names) * (2 if before else 1))]
    parts = {(n, "after"): after["pipelines"][n]["loader_breakdown"] for n in names}
    if before:
        parts.update({(n, "before"): before["pipelines"].get(n, {}).get("loader_breakdown") for n in names})
    for title, stages in GROUPS:
        for stage in stages:
            cells = []
            for n in names:
                for when in ("before", "after") if before else ("after",):
                    part = parts.get((n, when))
                    cells.append(f"{part['us_per_image'][stage]:.1f}" if part else "–")
            rows.append(f"| {title}: {LABELS[stage]} | " + " | ".join(cells) + " |")
    totals = []
    for n in names:
        for when in ("before", "after") if before else ("after",):
            part = parts.get((n, when))
            totals.append(f"**{part['total_us']:.1f}** ({part['images_per_s']:.0f} img/s)" if part else "–")
    rows.append("| total = cores / (images/s) | " + " | ".join(totals) + " |")
    return rows


def _goals(results: dict) -> list[str]:
    from fastdata.bench.loader_breakdown import GROUPS, LABELS

    lines = []
    outside = [s for _, stages in GROUPS[1:3] for s in stages] + ["idle"]
    for name, base, goal in GOALS:
        a, b = _rate(results, name), _rate(results, base)
        if a is None or not b:
            lines.append(f"- {name} ≥ {goal}× {base}: not measured")
            continue
        verdict = "met" if a / b >= goal else "NOT met"
        line = f"- {name} ≥ {goal}× {base}: {a / b:.2f}× ({a:.0f} vs {b:.0f} img/s): {verdict}"
        part = results["pipelines"][name].get("loader_breakdown")
        if a / b < goal and part:
            worst = sorted(outside, key=lambda s: -part["us_per_image"][s])[:3]
            line += "; held back by " + ", ".join(f"{LABELS[s]} {part['us_per_image'][s]:.1f} µs" for s in worst)
        lines.append(line)
    return lines


def report(steady: Path, one_pass: Path, before: Path, scales: Path, per_sample: Path) -> None:
    after = json.loads(steady.read_text())
    print("\n### Loaders, steady state (2 passes, the first one warm-up) — " + steady.name)
    print("\n".join(_loader_table(after)))
    peers = after["pipelines"].get("torchcodec")
    if peers:
        print(f"\ntorchcodec: {peers.get('status')}: {peers.get('note', '') or peers.get('images_per_s', {})}")
    if one_pass.is_file():
        print("\n### Loaders, the issue's first protocol (one pass per run) — " + one_pass.name)
        print("\n".join(_loader_table(json.loads(one_pass.read_text()))))
    print("\n### Breakdown before / after — " + (before.name + " / " if before.is_file() else "") + steady.name)
    print("\n".join(_breakdown_table(after, json.loads(before.read_text()) if before.is_file() else None)))
    if scales.is_file():
        table = json.loads(scales.read_text())
        print(f"\n### DCT scales M/8 against the powers of two — {scales.name}")
        print("| M/8 m8 picks | records | pow2 ms | m8 ms | m8 speed |\n| --- | --- | --- | --- | --- |")
        for m, row in table["per_m"].items():
            print(
                f"| {m}/8 | {row['records']} | {row['pow2_ms']:.3f} | {row['m8_ms']:.3f} | {row['m8_speedup']:.3f}× |"
            )
    print("\n### Goals (issue 29)")
    print("\n".join(_goals(after)))
    if per_sample.is_file():
        ratios = json.loads(per_sample.read_text())["ratios"]
        for path in ("transform(bytes)", "ds[i]"):
            ratio = ratios[f"{path} / getitems"]
            print(
                f"- {path} ≥ 0.95× the batch path (__getitems__), one core: {ratio:.3f}: "
                f"{'met' if ratio >= 0.95 else 'NOT met'} (against the batch call into a reused array: "
                f"{ratios[f'{path} / batch-call']:.3f})"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "imagenet-like-3000", help="image folder")
    parser.add_argument("--skip-before", action="store_true", help="no worktree of the old data path")
    parser.add_argument("--report-only", action="store_true", help="print the tables from an earlier run's JSON")
    args = parser.parse_args(argv)
    steady, one_pass = BENCH / "results" / "headline.json", BENCH / "results" / "headline-one-pass.json"
    before, scales = BENCH / "results" / "headline-before.json", BENCH / "results" / "kernel-scales.json"
    per_sample = BENCH / "results" / "kernel-per-sample.json"
    if not args.report_only:
        if not args.data.is_dir() or not any(args.data.iterdir()):
            _run(
                [
                    sys.executable,
                    str(ROOT / "tools" / "make_imagenet_like.py"),
                    str(args.data),
                    "--num-images",
                    "3000",
                    "--num-classes",
                    "100",
                ]
            )
        _bench(args.data, steady, steady=True, extra=["--peers", "torchcodec"])
        _bench(args.data, one_pass, steady=False)
        if not args.skip_before:
            _before(args.data, before)
        _run(
            [
                sys.executable,
                str(BENCH / "_lib" / "kernel_scales.py"),
                "--images",
                "3000",
                "--repeats",
                "7",
                "--json",
                str(scales),
            ]
        )
        _run(
            [
                sys.executable,
                str(BENCH / "_lib" / "kernel_per_sample.py"),
                "--images",
                "1000",
                "--repeats",
                "7",
                "--json",
                str(per_sample),
            ]
        )
    if not steady.is_file():
        print(
            f"{steady} is missing: run `python bench/loaders.py headline` without --report-only first", file=sys.stderr
        )
        return 1
    report(steady, one_pass, before, scales, per_sample)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
