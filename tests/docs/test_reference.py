"""The API reference (docs/reference/) covers the code: every public name, every command and option of the command
line, every ``FASTDATA_*`` variable, and every docstring example runs.

The reference's own pages are read (the autodoc directives, the ``{envvar}`` entries, the generated CLI page), so
these tests need no build. Where ``tools/docs.sh`` has built the site since the last change to the docs or the
code, the built index (``docs/_build/html/objects.inv``, read with Sphinx's own reader) is checked as well: what
the pages ask for must also have been rendered.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import posixpath
import re
import sys
from pathlib import Path

import pytest

from fastdata.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"
INVENTORY = DOCS / "_build" / "html" / "objects.inv"
PUBLIC_MODULES = (
    "fastdata",
    "fastdata.transforms",
    "fastdata.gpu_transforms",
    "fastdata.dali",
    "fastdata.integrations.timm",
)

sys.path.insert(0, str(DOCS / "_ext"))
import cli_reference  # noqa: E402 - docs/_ext: the CLI page's generator (no Sphinx needed)

_AUTO = re.compile(
    r"^\s*(?:\.\. auto(?:class|function|data|exception|module|attribute)::|```\{auto\w+\})\s*(\S+)", re.M
)
_CURRENT = re.compile(r"^\s*(?:\.\. currentmodule::|```\{currentmodule\})\s*(\S+)", re.M)
_ENVVAR = re.compile(r"^```\{envvar\}\s*(\S+)|^\.\. envvar::\s*(\S+)", re.M)


def public_names() -> set[str]:
    """Every name of the public modules' ``__all__``, by its public dotted path."""
    return {f"{module}.{name}" for module in PUBLIC_MODULES for name in importlib.import_module(module).__all__}


def autodoc_targets(text: str) -> set[str]:
    """The dotted names a page's autodoc directives document (a bare name is under the current module)."""
    found = set()
    events = sorted(
        [(m.start(), "auto", m.group(1)) for m in _AUTO.finditer(text)]
        + [(m.start(), "module", m.group(1)) for m in _CURRENT.finditer(text)]
    )
    current = ""
    for _, kind, name in events:
        if kind == "module":
            current = name
        else:
            found.add(name if name.startswith("fastdata") or not current else f"{current}.{name}")
    return found


def documented_in_pages() -> set[str]:
    return set().union(*(autodoc_targets(page.read_text(encoding="utf-8")) for page in REFERENCE.glob("*.md")))


def fresh_inventory() -> dict[str, dict[str, tuple]] | None:
    """The built site's object index, when it is newer than every source it was built from; otherwise None."""
    if not INVENTORY.exists():
        return None
    built = INVENTORY.stat().st_mtime
    sources = [*DOCS.rglob("*.md"), *DOCS.rglob("*.py"), *(ROOT / "fastdata").rglob("*.py")]
    if any(p.stat().st_mtime > built for p in sources if "_build" not in p.parts):
        return None
    from sphinx.util.inventory import InventoryFile

    with INVENTORY.open("rb") as stream:
        return InventoryFile.load(stream, "", posixpath.join)


def test_the_page_reader_sees_what_a_page_documents_and_what_it_leaves_out():
    page = (
        "```{eval-rst}\n.. autoclass:: fastdata.ShardDataset\n\n.. currentmodule:: fastdata.transforms\n\n"
        ".. autoclass:: RandomResizedCrop\n```\n"
    )
    assert autodoc_targets(page) == {"fastdata.ShardDataset", "fastdata.transforms.RandomResizedCrop"}
    assert "fastdata.DataLoaderX" in public_names() - autodoc_targets(page)


def test_every_public_name_is_in_the_reference():
    missing = public_names() - documented_in_pages()
    assert not missing, f"public names with no autodoc entry in docs/reference/: {sorted(missing)}"
    inventory = fresh_inventory()
    if inventory is not None:
        built = {name for kind, names in inventory.items() if kind.startswith("py:") for name in names}
        assert not public_names() - built, f"not in the built reference: {sorted(public_names() - built)}"


def cli_options() -> dict[str, list[argparse.Action]]:
    return {
        prog: list(cli_reference.cli_arguments(p)) for prog, p in cli_reference.cli_commands(build_parser()).items()
    }


def test_the_cli_page_is_generated_from_the_parser_with_every_command_and_option():
    assert ".. fastdata-cli::" in (REFERENCE / "cli.md").read_text(encoding="utf-8")
    text = "\n".join(cli_reference.cli_rst(build_parser()))
    commands = cli_options()
    assert len(commands) >= 7, sorted(commands)  # fastdata and its sub-commands
    for prog, actions in commands.items():
        assert f".. program:: {prog}\n" in text + "\n", prog
        for action in actions:
            names = cli_reference.option_names(action)
            assert re.search(rf"^\.\. option:: {re.escape(names[0])}\b", text, re.M), (prog, names)
    inventory = fresh_inventory()
    if inventory is not None:
        built = set(inventory.get("std:cmdoption", {}))
        wanted = {
            f"{prog.replace(' ', '-')}.{name}"
            for prog, actions in commands.items()
            for action in actions
            for name in cli_reference.option_names(action)
        }
        assert not wanted - built, f"options not in the built CLI page: {sorted(wanted - built)}"


def test_every_fastdata_environment_variable_is_documented():
    sources = [*(ROOT / "fastdata").rglob("*.py"), ROOT / "setup.py"]
    used = {name for path in sources for name in re.findall(r"\bFASTDATA_[A-Z0-9_]+", path.read_text(encoding="utf-8"))}
    assert {"FASTDATA_CPUS", "FASTDATA_NATIVE", "FASTDATA_CACHE"} <= used  # the scan sees the code
    page = (REFERENCE / "environment.md").read_text(encoding="utf-8")
    documented = {a or b for a, b in _ENVVAR.findall(page)}
    assert not used - documented, (
        f"FASTDATA_* variables not in docs/reference/environment.md: {sorted(used - documented)}"
    )
    assert not documented - used, f"documented but not read by the code: {sorted(documented - used)}"
    inventory = fresh_inventory()
    if inventory is not None:
        assert used <= set(inventory.get("std:envvar", {}))


def _docstrings() -> list[tuple[str, str]]:
    """``(name, docstring)`` of every public object and of each of its members that fastdata defines."""
    found = []
    for public in sorted(public_names()):
        module_name, _, name = public.rpartition(".")
        obj = getattr(importlib.import_module(module_name), name)
        found.append((public, inspect.getdoc(obj) or ""))
        if inspect.isclass(obj):
            for member_name, member in vars(obj).items():
                func = getattr(member, "fget", None) or getattr(member, "__func__", None) or member
                if getattr(func, "__module__", "").startswith("fastdata") and getattr(func, "__doc__", None):
                    found.append((f"{public}.{member_name}", inspect.cleandoc(func.__doc__)))
    return found


@pytest.mark.parametrize("literal", ["Example::\n\n    >>> x = 1\n"])
def test_the_example_check_tells_a_literal_block_from_a_doctest_block(literal):
    assert _literal_prompts(literal)
    assert not _literal_prompts("Example:\n    >>> x = 1\n")


def _literal_prompts(doc: str) -> bool:
    """True when a ``>>>`` prompt opens a ``::`` literal block (shown, never run by the doctest builder)."""
    return re.search(r"::\n\s*\n\s+>>> ", doc) is not None


def test_docstring_examples_are_doctest_blocks_that_the_docs_build_runs():
    docs = _docstrings()
    with_examples = [name for name, doc in docs if ">>> " in doc]
    assert len(with_examples) >= 10, with_examples  # the scan sees the examples
    literal = [name for name, doc in docs if _literal_prompts(doc)]
    assert not literal, f"`>>>` examples in a literal block (write `Example:`, not `Example::`): {literal}"
