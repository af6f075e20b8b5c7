"""Every benchmark entry point under bench/ and each of its commands starts and answers ``--help``, so that a
renamed script or argument fails here instead of in a user's shell."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
ENTRIES = sorted(p for p in BENCH.glob("*.py"))


def commands(entry: Path) -> list[str]:
    """The names in the entry point's ``COMMANDS`` literal."""
    for node in ast.parse(entry.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "COMMANDS":
            return [key.value for key in node.value.keys]  # type: ignore[attr-defined]
    raise AssertionError(f"{entry.name} has no COMMANDS")


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120, cwd=BENCH.parent)


def test_bench_holds_only_entry_points_named_for_questions():
    assert ENTRIES, "no entry points under bench/"
    assert not any(char.isdigit() for p in ENTRIES for char in p.stem), "an entry point named after an issue"
    assert not list(BENCH.glob("results*.json")), "results belong under bench/results/"


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda p: p.stem)
def test_an_entry_point_lists_its_commands(entry):
    done = run(str(entry), "--help")
    assert done.returncode == 0, done.stderr
    for name in commands(entry):
        assert name in done.stdout


@pytest.mark.parametrize(
    ("entry", "command"), [(e, c) for e in ENTRIES for c in commands(e)], ids=lambda x: getattr(x, "stem", x)
)
def test_each_command_answers_help(entry, command):
    done = run(str(entry), command, "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


def test_an_unknown_command_is_one_line():
    done = run(str(BENCH / "kernel.py"), "nope")
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0 and "choose one of" in done.stderr
