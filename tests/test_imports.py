"""Imports run one way, down the flow (ARCHITECTURE.md): no module imports one that imports it back, directly or
through others, and no room (a sub-package, or a top-level module) imports a room that imports it back. Lazy
imports inside functions count: they are how circles hide."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fastdata"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    """A ``fastdata`` module or package of this checkout (C extensions by their source)."""
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists() or path.with_suffix(".c").exists()


def imports_of(path: Path) -> set[str]:
    """The fastdata modules ``path`` imports (``from pkg import mod`` is the module, ``from pkg import name`` pkg)."""
    found: set[str] = set()
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "fastdata")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            if base.split(".")[0] != "fastdata":
                continue
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if is_module(f"{base}.{alias.name}") else base)
    found.discard(here)
    return {name for name in found if is_module(name)}


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def room(module: str) -> str:
    """``fastdata.storage.cache`` → ``storage``; ``fastdata.cli`` → ``cli``; ``fastdata`` → ``fastdata``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return groups


def rooms_graph(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    """Room → rooms it imports. ``fastdata/__init__.py`` (the public API, which imports every room) and package
    ``__init__`` files importing their own modules are left out: they re-export, they are not part of the flow."""
    edges: dict[str, set[str]] = {}
    for module, imported in modules.items():
        if module == "fastdata":
            continue
        for other in imported:
            if other != "fastdata" and room(other) != room(module):
                edges.setdefault(room(module), set()).add(room(other))
    return edges


def test_the_checker_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_one_that_imports_it_back():
    modules = {m: {i for i in imported if i != "fastdata"} for m, imported in graph().items()}
    assert cycles(modules) == []


def test_no_room_imports_one_that_imports_it_back():
    assert cycles(rooms_graph(graph())) == []


def test_storage_does_not_import_the_command_line():
    assert not any(room(m) == "storage" and "fastdata.cli" in imported for m, imported in graph().items())


ARCHITECTURE = PACKAGE.parent / "ARCHITECTURE.md"


def floors() -> list[list[str]]:
    """The rooms floor by floor, top down, as ARCHITECTURE.md draws them: the fenced block after "### Floors",
    one floor a line, rooms separated by ``·``, anything after ``#`` a comment."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    block = text.split("### Floors", 1)[1].split("```", 2)[1]
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return [[name.strip() for name in line.split("·")] for line in lines if line]


def rooms_on_disk() -> set[str]:
    """Every room: each sub-package and each top-level module but ``__init__``."""
    found = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    return found | {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}


def test_architecture_draws_every_room_on_one_floor():
    drawn = [name for floor in floors() for name in floor]
    assert sorted(drawn) == sorted(set(drawn)), "a room is drawn on two floors"
    assert set(drawn) == rooms_on_disk()


def test_no_room_imports_one_that_stands_above_it():
    level = {name: i for i, floor in enumerate(floors()) for name in floor}
    upward = sorted((a, b) for a, targets in rooms_graph(graph()).items() for b in targets if level[b] <= level[a])
    assert upward == [], "imports that run up (or sideways on one floor): move the code, or hand the function down"


def test_the_floor_check_finds_an_arrow_up():
    level = {"loader": 0, "datasets": 1}
    edges = {"datasets": {"loader"}, "loader": {"datasets"}}
    assert sorted((a, b) for a, t in edges.items() for b in t if level[b] <= level[a]) == [("datasets", "loader")]


def test_only_the_public_api_imports_the_package_itself():
    """``from fastdata import X`` in a room runs back up: ``fastdata/__init__.py`` imports every room."""
    assert sorted(m for m, imported in graph().items() if m != "fastdata" and "fastdata" in imported) == []
