"""Every name the README and the documentation pages show can be imported from where they show it, every keyword they
show in a call of a public function or class is one it takes, and the import paths users had before the package moved
into rooms (round three) still work (the four deprecated modules: tests/test_deprecations.py).

The pages' Python blocks are also run (tests/docs/test_code_blocks.py); this file covers the names written in prose
and in blocks that are only compiled (``<!-- not-run: ... -->``)."""

from __future__ import annotations

import ast
import importlib
import re
import types
from pathlib import Path

import pytest

from tests.docs.test_code_blocks import doc_files

ROOT = Path(__file__).resolve().parents[1]
#: README.md, every page under docs/ (as tests/docs/test_code_blocks.py finds them) and the benchmarks' README.
DOCS = [ROOT / p for p in doc_files()] + [ROOT / "bench" / "README.md"]

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
    # a name followed by "/" is a folder (the wheel's `fastdata.libs/`), not a Python name
    return [m.rstrip(".") for m in re.findall(r"`(fastdata(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?![\w/])", text)]


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


#: A call of a public name written in backticks in the prose: `ShardDataset(root, transform=...)`.
CALL = re.compile(r"`((?:fastdata\.)?(?:[a-z_]+\.)?[A-Za-z_]\w*\(.*?\))`")


def prose_calls(text: str) -> list[tuple[str, list[str]]]:
    """``(dotted name, keyword names)`` of each call in backticks that parses as Python and names a public object."""
    calls = []
    for source in CALL.findall(text):
        try:
            node = ast.parse(source, mode="eval").body
        except SyntaxError:
            continue
        if not isinstance(node, ast.Call) or not node.keywords:
            continue
        name = ast.unparse(node.func)
        if not name.startswith("fastdata."):
            name = f"fastdata.{name}"
        try:
            obj = resolve(name)
        except (ImportError, AttributeError):
            continue  # a peer's or torch's name (e.g. `DataLoader(...)`): not ours to check
        if isinstance(obj, types.ModuleType) or not callable(obj):
            continue
        calls.append((name, [k.arg for k in node.keywords if k.arg is not None]))
    return calls


def accepted_keywords(obj: object) -> set[str] | None:
    """The keyword names ``obj`` takes, or None when it takes any (``**kwargs`` it does not document here)."""
    import dataclasses
    import inspect

    from fastdata.packing.options import PackOptions

    params = inspect.signature(obj).parameters  # type: ignore[arg-type]
    names = {n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        import fastdata

        if obj is not fastdata.pack:
            return None
        names |= {f.name for f in dataclasses.fields(PackOptions)}  # pack(src, out, **PackOptions' fields)
    return names


def shown_calls() -> list[tuple[str, str, list[str]]]:
    found = []
    for doc in DOCS:
        for name, keywords in prose_calls(doc.read_text(encoding="utf-8")):
            found.append((doc.relative_to(ROOT).as_posix(), name, keywords))
    return found


def test_prose_calls_are_found():
    text = "`ShardDataset(root, transform=RandomResizedCrop(224), cache_dir=d)` and `torch.utils.data.DataLoader(x=1)`"
    assert prose_calls(text) == [("fastdata.ShardDataset", ["transform", "cache_dir"])]


def test_a_renamed_keyword_in_the_prose_is_caught():
    from fastdata import ShardDataset

    assert "cache_dir" in accepted_keywords(ShardDataset)
    assert "cache_folder" not in accepted_keywords(ShardDataset)


@pytest.mark.parametrize(("doc", "name", "keywords"), shown_calls())
def test_every_keyword_the_docs_show_is_taken(doc, name, keywords):
    accepted = accepted_keywords(resolve(name))
    if accepted is None:
        return
    assert [k for k in keywords if k not in accepted] == [], f"{doc}: `{name}(...)` shows keywords it does not take"
