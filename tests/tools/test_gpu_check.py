"""tools/gpu_check.sh on a machine without CUDA: one line that says so, exit 0 (with CUDA it runs everything)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device: gpu_check.sh runs for real")
def test_without_cuda_it_says_so_in_one_line():
    done = subprocess.run(["bash", "tools/gpu_check.sh"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    assert done.stdout.strip().count("\n") == 0 and "no CUDA device" in done.stdout


def test_it_selects_every_cuda_test_by_one_marker():
    """No test skips on a missing CUDA device by its own skipif: ``-m cuda`` must find them all."""
    offenders = [
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "tests").rglob("test_*.py")
        if p.name != Path(__file__).name and "skipif(not torch.cuda.is_available()" in p.read_text()
    ]
    assert offenders == []


def test_the_report_counts_the_junit_results_and_keeps_each_benchmark(tmp_path):
    """tools/gpu_check_report.py on a fake work folder: what gpu_check.sh's steps leave on a GPU machine."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gpu_check_report as report
    finally:
        sys.path.remove(str(ROOT / "tools"))
    (tmp_path / "junit.xml").write_text(
        '<?xml version="1.0"?><testsuites><testsuite name="pytest">'
        '<testcase classname="tests.loader.test_prefetcher" name="test_ok" time="0.1"/>'
        '<testcase classname="tests.loader.test_prefetcher" name="test_bad" time="0.1">'
        '<failure message="x"/></testcase>'
        '<testcase classname="tests.dali.test_dali" name="test_gpu[True]" time="0"><skipped message="no dali"/>'
        "</testcase>"
        '<testcase classname="" name="tests.trainers.test_timm_loader" time="0"><error message="collection"/>'
        "</testcase></testsuite></testsuites>"
    )
    (tmp_path / "prefetcher.json").write_text(json.dumps({"images_per_s": {"plain": 1.0, "prefetcher": 2.0}}))
    (tmp_path / "dali.log").write_text("Traceback ...\nImportError: boom\n")
    facts = {"device": "Fake GPU", "driver": "1.0", "cuda": "13.0", "torch": "2.x", "dali": None}
    got = report.assemble(tmp_path, 42, facts)
    assert got["device"] == "Fake GPU" and got["seconds"] == 42
    tests = got["tests"]
    assert (tests["passed"], tests["failed"], tests["errors"], tests["skipped"]) == (1, 1, 1, 1)
    assert tests["failing"] == ["tests.loader.test_prefetcher::test_bad", "tests.trainers.test_timm_loader"]
    assert tests["skip_reasons"] == {"no dali": 1}
    bench = got["benchmarks"]
    assert bench["prefetcher"]["images_per_s"]["prefetcher"] == 2.0
    assert "ImportError: boom" in bench["dali"]["error"] and bench["policies"] == {"error": "did not run"}
    line = report.summary(tmp_path / "out.json", got)
    assert "1 passed, 2 failed, 1 skipped" in line and "['policies', 'dali']" in line
    assert set(report.device_facts()) >= {"device", "driver", "cuda", "torch", "dali", "python"}  # runs without CUDA


def test_without_a_report_the_failure_says_why(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gpu_check_report as report
    finally:
        sys.path.remove(str(ROOT / "tools"))
    (tmp_path / "pytest.log").write_text("ERROR: usage\n")
    tests = report.test_results(tmp_path)
    assert tests["passed"] == 0 and tests["failing"] == ["pytest wrote no report: ERROR: usage\n"]
