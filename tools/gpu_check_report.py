#!/usr/bin/env python
"""Assemble tools/gpu_check.sh's ONE JSON from what its steps left in a work folder.

The folder holds ``junit.xml`` (``pytest -m cuda --junitxml``), ``pytest.log``, and ``NAME.json`` or ``NAME.log``
for each benchmark of bench/gpu.py. Usage::

    python tools/gpu_check_report.py WORK OUT SECONDS
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

BENCHMARKS = ("prefetcher", "policies", "dali")


def smi(field: str) -> str | None:
    """One ``nvidia-smi --query-gpu`` field of the first GPU, or None where nvidia-smi is missing or fails."""
    try:
        done = subprocess.run(
            ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else None


def device_facts() -> dict[str, Any]:
    """The device, its driver and the versions of what ran on it."""
    import torch

    try:
        import nvidia.dali as dali  # type: ignore[import-not-found]

        dali_version: str | None = dali.__version__
    except ImportError:
        dali_version = None
    cuda = torch.cuda.is_available()
    return {
        "device": torch.cuda.get_device_name() if cuda else None,
        "capability": list(torch.cuda.get_device_capability()) if cuda else None,
        "driver": smi("driver_version"),
        "memory_total": smi("memory.total"),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "dali": dali_version,
        "python": platform.python_version(),
    }


def test_results(work: Path) -> dict[str, Any]:
    """Counts and failing test ids from ``junit.xml`` (skips with their reasons, so a missing package shows)."""
    tests: dict[str, Any] = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failing": [], "skip_reasons": {}}
    junit = work / "junit.xml"
    if not junit.exists():
        log = work / "pytest.log"
        tests["failing"].append("pytest wrote no report: " + (log.read_text()[-500:] if log.exists() else ""))
        return tests
    for case in ET.parse(junit).getroot().iter("testcase"):
        ident = "::".join(p for p in (case.get("classname"), case.get("name")) if p)
        outcome = {child.tag: child for child in case}
        if "failure" in outcome or "error" in outcome:
            tests["failed" if "failure" in outcome else "errors"] += 1
            tests["failing"].append(ident)
        elif "skipped" in outcome:
            tests["skipped"] += 1
            reason = outcome["skipped"].get("message") or "skipped"
            tests["skip_reasons"][reason] = tests["skip_reasons"].get(reason, 0) + 1
        else:
            tests["passed"] += 1
    return tests


def benchmark_results(work: Path) -> dict[str, Any]:
    """Each benchmark's JSON, or ``{"error": the end of its log}`` where it wrote none."""
    results: dict[str, Any] = {}
    for name in BENCHMARKS:
        path, log = work / f"{name}.json", work / f"{name}.log"
        if path.exists():
            results[name] = json.loads(path.read_text())
        else:
            results[name] = {"error": log.read_text()[-800:] if log.exists() else "did not run"}
    return results


def assemble(work: Path, seconds: int, facts: dict[str, Any]) -> dict[str, Any]:
    """The report: device facts, the CUDA tests' results, the benchmarks' numbers, the seconds it all took."""
    return {**facts, "seconds": seconds, "tests": test_results(work), "benchmarks": benchmark_results(work)}


def summary(out: Path, report: dict[str, Any]) -> str:
    """One line: where the JSON is, the device, the tests' counts and the time."""
    tests = report["tests"]
    return (
        f"==> {out}: {report['device']}, driver {report['driver']}; cuda tests {tests['passed']} passed, "
        f"{tests['failed'] + tests['errors']} failed, {tests['skipped']} skipped; "
        f"benchmarks with an error: {[k for k, v in report['benchmarks'].items() if 'error' in v] or 'none'}; "
        f"{report['seconds']} s"
    )


def main(argv: list[str]) -> None:
    work, out, seconds = Path(argv[0]), Path(argv[1]), int(argv[2])
    report = assemble(work, seconds, device_facts())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(summary(out, report))


if __name__ == "__main__":
    main(sys.argv[1:])
