"""Every benchmark entry point under bench/ and each of its commands starts and answers ``--help``, so that a
renamed script or argument fails here instead of in a user's shell."""

from __future__ import annotations

import ast
import json
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


#: Runs each ``argv`` of the JSON list in argv[1] as ``python ARGV...`` would, one after the other in this one
#: process (a fresh interpreter per call costs seconds of imports each): exit status and output of each.
HELP_DRIVER = """
import contextlib, io, json, runpy, sys, traceback
sys.path.insert(0, sys.argv[2])
results = []
for argv in json.loads(sys.argv[1]):
    out, err, code = io.StringIO(), io.StringIO(), 0
    sys.argv = list(argv)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(argv[0], run_name="__main__")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            code, _ = 1, traceback.print_exc()
    results.append([code, out.getvalue(), err.getvalue()[-2000:]])
print(json.dumps(results))
"""

HELPS = [(str(e), "--help") for e in ENTRIES] + [(str(e), c, "--help") for e in ENTRIES for c in commands(e)]


@pytest.fixture(scope="module")
def helps() -> dict[tuple[str, ...], tuple[int, str, str]]:
    """Every ``--help`` of every entry point and command, answered in one fresh interpreter."""
    done = run("-c", HELP_DRIVER, json.dumps(HELPS), str(BENCH))
    assert done.returncode == 0, done.stderr[-3000:]
    return {argv: tuple(result) for argv, result in zip(HELPS, json.loads(done.stdout.splitlines()[-1]), strict=True)}


def test_bench_holds_only_entry_points_named_for_questions():
    assert ENTRIES, "no entry points under bench/"
    assert not any(char.isdigit() for p in ENTRIES for char in p.stem), "an entry point named after an issue"
    assert not list(BENCH.glob("results*.json")), "results belong under bench/results/"


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda p: p.stem)
def test_an_entry_point_lists_its_commands(entry, helps):
    code, stdout, stderr = helps[(str(entry), "--help")]
    assert code == 0, stderr
    for name in commands(entry):
        assert name in stdout


@pytest.mark.parametrize(
    ("entry", "command"), [(e, c) for e in ENTRIES for c in commands(e)], ids=lambda x: getattr(x, "stem", x)
)
def test_each_command_answers_help(entry, command, helps):
    code, stdout, stderr = helps[(str(entry), command, "--help")]
    assert code == 0, stderr
    assert "usage:" in stdout


def test_an_unknown_command_is_one_line():
    done = run(str(BENCH / "kernel.py"), "nope")
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0 and "choose one of" in done.stderr
