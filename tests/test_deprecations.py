"""The four old top-level modules still import, warn once with their new home and the release that removes them,
and hand out the very objects of that new home."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: old module -> (a name it re-exports, where that name lives now, what the warning tells users to import from)
MOVED = {
    "fastdata.cpus": ("available_cpus", "fastdata", "fastdata (fastdata.available_cpus)"),
    "fastdata.multicrop": ("MultiCrop", "fastdata.transforms", "fastdata.transforms"),
    "fastdata.resolution": ("ramp", "fastdata.transforms", "fastdata.transforms"),
    "fastdata.timm_loader": ("create_loader", "fastdata.integrations.timm", "fastdata.integrations.timm"),
}

PROBE = """
import importlib, sys, warnings
old, name, new = sys.argv[1:4]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    exec(f"import {old}")  # an import statement, as users write it
module = sys.modules[old]
moved = [w for w in caught if issubclass(w.category, DeprecationWarning) and old in str(w.message)]
print(len(moved))
print(moved[0].message if moved else "")
print(moved[0].filename if moved else "")
print(getattr(module, name) is getattr(importlib.import_module(new), name))
"""


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_warns_once_and_re_exports_the_new_objects(old):
    name, new, told = MOVED[old]
    # a fresh interpreter: a module warns when it is first imported, and this one may be imported already
    out = subprocess.run(
        [sys.executable, "-c", PROBE, old, name, new], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    count, message, filename, same = out
    assert count == "1"
    assert message == f"{old} is deprecated and will be removed in fastdata 0.3.0: import from {told} instead"
    assert filename == "<string>", "the warning must point at the code that imported the old path"
    assert same == "True"


def test_the_removal_release_is_after_this_one():
    from fastdata._util.deprecation import REMOVED_IN
    from fastdata._util.version import __version__

    def key(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split(".")[:3])

    assert key(REMOVED_IN) > key(__version__)
