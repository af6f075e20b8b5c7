"""Every name the README shows can be imported from where it shows it, and the import paths users had before the
package moved into rooms (round three) still work (the four deprecated modules: tests/test_deprecations.py)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "bench" / "README.md"]

#: Paths users had before the move, and which still resolve (the README now shows the new homes).
OLD_PATHS = [
    "fastdata.transforms.RandomResizedCrop",
    "fastdata.transforms.ResizeCenterCrop",
    "fastdata.transforms.Decode",
    "fastdata.transforms.DecodeTransform",
    "fastdata.gpu_transforms.Mixup",
    "fastdata.gpu_transforms.MixUp",
    "fastdata.gpu_transforms.CutMix",
    "fastdata.gpu_transforms.MixupCutmix",
    "fastdata.ShardDataset",
    "fastdata.MixedDataset",
    "fastdata.MixedSampler",
]


def code_imports(text: str) -> list[str]:
    """Inside fenced Python blocks: ``module.name`` for each name imported, and each ``fastdata.a.b`` used."""
    found, language = [], None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("```"):
            language = None if language is not None else (line[3:].strip() or "text")
            continue
        if language not in ("python", "py"):
            continue
        found += re.findall(r"(?<![\w.])fastdata(?:\.[A-Za-z_]\w*)+", line.split("#", 1)[0])
        if not line.startswith(("from fastdata", "import fastdata")):
            continue
        node = ast.parse(line.split("#", 1)[0]).body[0]
        if isinstance(node, ast.ImportFrom):
            found += [f"{node.module}.{a.name}" for a in node.names]
        else:
            found += [a.name for a in node.names]
    return found


def dotted_names(text: str) -> list[str]:
    """``fastdata.a.b`` written in backticks in the prose (calls and attribute paths, without arguments)."""
    return [m.rstrip(".") for m in re.findall(r"`(fastdata(?:\.[A-Za-z_][A-Za-z0-9_]*)+)", text)]


def resolve(path: str) -> object:
    """Import the longest importable module prefix of ``path``, then walk the attributes that follow."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(path)


def readme_names() -> list[str]:
    names: set[str] = set()
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        names.update(code_imports(text))
        names.update(dotted_names(text))
    # optional back-ends whose import needs their package: checked where it is installed
    return sorted(n for n in names if not n.startswith("fastdata.dali.") or _has("nvidia.dali"))


def _has(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def test_the_readme_shows_imports():
    assert len(readme_names()) > 20


@pytest.mark.parametrize("path", readme_names())
def test_every_name_the_readme_shows_resolves(path):
    resolve(path)


@pytest.mark.parametrize("path", OLD_PATHS)
def test_old_import_paths_still_work(path):
    resolve(path)


def test_old_and_new_homes_are_the_same_objects():
    assert resolve("fastdata.gpu_transforms.MixUp") is resolve("fastdata.gpu_transforms.Mixup")


def test_readme_shows_every_shard_dataset_parameter():
    """The README's ShardDataset signature names every parameter the class takes."""
    import inspect

    from fastdata import ShardDataset

    text = (ROOT / "README.md").read_text()
    shown = re.search(r"\*\*`ShardDataset\((.*?)\)`\*\*", text, re.S)
    assert shown is not None
    names = [p for p in inspect.signature(ShardDataset).parameters if p != "self"]
    assert [n for n in names if not re.search(rf"\b{n}\b", shown.group(1))] == []
