"""The benchmark charts: every results file with a chart maker gives a PNG, from its name or, saved under another
name (``--json PATH``), from its keys; an entry point draws the chart of the JSON it wrote."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH / "_lib"))

import charts  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name", sorted(charts.CHARTS))
def test_each_results_file_with_a_maker_gives_a_png(name, tmp_path):
    source = BENCH / "results" / f"{name}.json"
    assert source.is_file(), f"{source} is named in CHARTS but missing"
    png = charts.chart(source, tmp_path)
    assert png == tmp_path / f"{name}.png"
    assert png.read_bytes()[:8] == PNG


@pytest.mark.parametrize("name", sorted(charts.CHARTS))
def test_a_renamed_results_file_is_told_by_its_keys(name, tmp_path):
    renamed = tmp_path / "my-run.json"
    shutil.copy(BENCH / "results" / f"{name}.json", renamed)
    png = charts.chart(renamed)
    assert png == tmp_path / "my-run.png" and png.read_bytes()[:8] == PNG


def test_a_file_without_a_chart_is_left_alone(tmp_path):
    other = tmp_path / "notes.json"
    other.write_text(json.dumps({"anything": 1}))
    assert charts.chart(other) is None
    assert not (tmp_path / "notes.png").exists()


def test_only_new_files_and_the_named_json_are_charted(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    old = results / "kernel.json"
    shutil.copy(BENCH / "results" / "kernel.json", old)
    elsewhere = tmp_path / "elsewhere" / "remote.json"
    elsewhere.parent.mkdir()
    shutil.copy(BENCH / "results" / "remote.json", elsewhere)
    since = max(old.stat().st_mtime, elsewhere.stat().st_mtime) + 1
    assert charts.chart_new_results(since, results, argv=["--json", str(elsewhere)]) == []
    made = charts.chart_new_results(0, results, argv=["--json", str(elsewhere)])
    assert sorted(p.name for p in made) == ["kernel.png", "remote.png"]
    assert (elsewhere.parent / "remote.png").read_bytes()[:8] == PNG
