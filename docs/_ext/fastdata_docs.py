"""fastdata's own Sphinx extension: reference pages generated from the code, so they cannot drift from it.

- ``.. fastdata-cli::`` renders the ``fastdata`` command line from the real argparse parser
  (:func:`fastdata.cli.build_parser`): every command, its usage, and every argument and option as a
  ``.. option::`` target (so each is in ``objects.inv`` as ``std:cmdoption``).
- ``.. fastdata-raises:: module.ErrorClass`` lists the messages fastdata's source raises that error with,
  read from the code (``raise ErrorClass(...)``: the message's literal text, an f-string's fields as ``{...}``).
- ``missing-reference``: an internal path of a public object (``fastdata.formats.manifest.Manifest``, as type
  hints and ``__module__`` name it) resolves to the public name it is documented under (``fastdata.Manifest``).
  Nothing is ignored here: a reference that still does not resolve stays a warning (an error under ``-W``).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import json
import re
from pathlib import Path
from typing import Any

from cli_reference import cli_rst
from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.util import docname_join
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

PACKAGE = Path(__file__).resolve().parents[2] / "fastdata"


# ---------------------------------------------------------------------------------------------------- the CLI
class CliDirective(SphinxDirective):
    """``.. fastdata-cli::``: the command line's reference, generated from :func:`fastdata.cli.build_parser`."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        """The sections of every command, parsed as reST."""
        from fastdata.cli import build_parser

        node = nodes.section()
        node.document = self.state.document
        content = StringList(cli_rst(build_parser()), source="fastdata.cli.build_parser()")
        nested_parse_with_titles(self.state, content, node)
        return node.children


# ------------------------------------------------------------------------------------------- raised messages
def _message_text(node: ast.expr) -> str | None:
    """The literal text of a message expression; an f-string's fields become ``{...}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_message_text(v) or "{...}" if isinstance(v, ast.Constant) else "{...}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _message_text(node.left), _message_text(node.right)
        return (left or "{...}") + (right or "{...}")
    return None


def raised_messages(error: type[BaseException]) -> list[tuple[str, int, str]]:
    """``(module, line, message)`` for every ``error(...)`` built in fastdata's source with a readable message.

    A message is the first argument, or, for an error built from parts (``CorruptRecordError(shard, offset,
    reason)``), the parts that hold text, joined by ``": "``.
    """
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call):
                continue
            func = call.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name != error.__name__:
                continue
            texts = [_message_text(arg) for arg in call.args]
            text = ": ".join(t for t in texts if t and t.strip("{.}"))
            if text:
                found.append((module.removesuffix(".__init__"), call.lineno, text))
    return found


class RaisesDirective(SphinxDirective):
    """``.. fastdata-raises:: dotted.ErrorClass``: the messages fastdata raises it with, from the source."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        """A list of the messages, each with the module and line that raises it."""
        module_name, _, name = self.arguments[0].rpartition(".")
        error = getattr(importlib.import_module(module_name), name)
        messages = raised_messages(error)
        if not messages:
            return [nodes.paragraph(text="Raised with messages built at run time (see the class above).")]
        items = nodes.bullet_list()
        for module, line, text in messages:
            para = nodes.paragraph()
            para += nodes.literal(text=text)
            para += nodes.Text(f" ({module}, line {line})")
            items += nodes.list_item("", para)
        return [items]


# -------------------------------------------------------------------------------------- public-name resolution
def _documented(env: Any) -> dict[int, str]:
    """``id(object) -> documented name`` for every object the Python domain holds (the shortest name wins)."""
    names: dict[int, str] = {}
    for fullname in sorted(env.get_domain("py").objects, key=len, reverse=True):
        found = _import_path(fullname)
        if found is not None and not found[1]:
            names[id(found[0])] = fullname
    return names


def _import_path(target: str) -> tuple[Any, list[str]] | None:
    """The longest importable prefix object of ``target`` (modules, then classes) and the attribute names after it."""
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        rest = parts[cut:]
        for i, attr in enumerate(rest):
            child = getattr(obj, attr, None)
            if child is None:
                return None
            if not (inspect.isclass(child) or inspect.ismodule(child) or inspect.isfunction(child)):
                return obj, rest[i:]
            obj = child
        return obj, []
    return None


_DOCUMENTED: dict[int, dict[int, str]] = {}  # per environment (by id): built once all documents are read


def resolve_public(app: Sphinx, env: Any, node: Any, contnode: nodes.Element) -> nodes.Element | None:
    """``missing-reference``: an internal path of a documented object resolves to the name it is documented under.

    ``fastdata.formats.manifest.Manifest`` (a type hint's path) finds the object ``fastdata.Manifest`` documents.
    """
    target = node.get("reftarget", "")
    if node.get("refdomain") != "py":
        return None
    documented = _DOCUMENTED.get(id(env))
    if documented is None:
        documented = _DOCUMENTED[id(env)] = _documented(env)
    if "." not in target:  # a bare name (a type hint of a TYPE_CHECKING import): the one documented object it names
        named = {name for name in documented.values() if name.rsplit(".", 1)[-1] == target}
        if len(named) != 1:
            return None
        public = named.pop()
    else:
        found = _import_path(target) if target.startswith("fastdata.") else None
        if found is None or id(found[0]) not in documented:
            return None
        public = ".".join([documented[id(found[0])], *found[1]])
    if public == target:
        return None
    domain = env.get_domain("py")
    return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], public, node, contnode)


# ------------------------------------------------------------------------------------------------ module map
def package_modules() -> list[str]:
    """Every module of the fastdata package, by dotted name, in file order (compiled kernels left out)."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _summary(module_name: str) -> str:
    tree = ast.parse((PACKAGE.parent / _module_file(module_name)).read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree) or ""
    return doc.strip().split("\n\n")[0].replace("\n", " ")


def _shadowed(module_name: str) -> bool:
    """True when the package's attribute of that name is not the module (``gpu_transforms.rand_augment``)."""
    parent, _, last = module_name.rpartition(".")
    return bool(parent) and not inspect.ismodule(getattr(importlib.import_module(parent), last, None))


def _module_file(module_name: str) -> Path:
    path = Path(*module_name.split("."))
    return path / "__init__.py" if (PACKAGE.parent / path).is_dir() else path.with_suffix(".py")


class ModulesDirective(SphinxDirective):
    """``.. fastdata-modules::``: every module of the package with its docstring's first paragraph.

    Each is a ``py:module`` target, so a docstring's ``:mod:`fastdata.decode.shared_ring``` resolves to its line
    here. The summary is shown as text (not parsed), so internal modules add no references of their own.
    """

    has_content = False

    def run(self) -> list[nodes.Node]:
        """A definition list: module name (a ``py:module`` target), then its summary."""
        domain = self.env.get_domain("py")
        out: list[nodes.Node] = []
        items = nodes.definition_list()
        for name in package_modules():
            if name in self.config.fastdata_automodules or _shadowed(name):
                continue  # documented with its public names on its room's page, or a name a function took over
            node_id = f"module-{name}"
            term = nodes.term()
            term += nodes.literal(text=name)
            target = nodes.target("", "", ids=[node_id])
            self.state.document.note_explicit_target(target)
            domain.note_module(name, node_id, _summary(name), "", False)
            domain.note_object(name, "module", node_id, location=(self.env.docname, self.lineno))
            item = nodes.definition_list_item()
            item += target
            item += term
            definition = nodes.definition()
            definition += nodes.paragraph(text=_summary(name))
            item += definition
            items += item
        out.append(items)
        return out


# ------------------------------------------------------------------------------------------ landing-page cards
class CardsDirective(SphinxDirective):
    """``.. fastdata-cards::``: one card per ``docname: description`` line, linking to the page by its title.

    A page that is not in this build (a section another branch adds) gets no card, as the top toctree's globs
    match nothing for it; a line that is not ``docname: description`` is an error.
    """

    has_content = True

    def run(self) -> list[nodes.Node]:
        """A grid of cards for the pages this build has."""
        grid = nodes.container(classes=["fastdata-cards"])
        for line in self.content:
            docname, sep, description = line.partition(":")
            if not sep or not docname.strip() or not description.strip():
                raise self.error(f"fastdata-cards: {line!r} is not 'docname: description'")
            docname = docname.strip()
            if docname not in self.env.found_docs:
                continue
            card = nodes.container(classes=["fastdata-card"])
            title = nodes.paragraph(classes=["fastdata-card-title"])
            ref = addnodes.pending_xref(
                "", refdomain="std", reftype="doc", reftarget="/" + docname, refexplicit=False, refwarn=True
            )
            ref += nodes.inline("", "")
            title += ref
            card += title
            card += nodes.paragraph(text=description.strip())
            grid += card
        return [grid]


# ----------------------------------------------------------------------------------- "examples using X"
PUBLIC_MODULES = (
    "fastdata",
    "fastdata.transforms",
    "fastdata.gpu_transforms",
    "fastdata.dali",
    "fastdata.integrations.timm",
)


@functools.cache
def public_names() -> frozenset[str]:
    """Every name of the public modules' ``__all__``, by its public dotted path."""
    return frozenset(f"{m}.{name}" for m in PUBLIC_MODULES for name in importlib.import_module(m).__all__)


def examples_using(app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """``autodoc-process-docstring``: a public name's docstring ends with the tutorials that use it.

    sphinx-gallery records which names each tutorial uses (``doc_module``); the thumbnails come from its
    ``minigallery`` directive, under a rubric only where there is at least one tutorial.
    """
    if what not in ("class", "exception", "function") or name not in public_names():
        return
    conf = app.config.sphinx_gallery_conf
    index = Path(conf["src_dir"], conf["backreferences_dir"], "backreferences_all.json")
    if not index.exists() or not json.loads(index.read_text(encoding="utf-8")).get(name):
        return
    short = name.rsplit(".", 1)[-1]
    lines += ["", f".. rubric:: Tutorials using ``{short}``", "", f".. minigallery:: {name}", ""]


# ------------------------------------------------------------------------------------ dataclass signatures
def factory_defaults(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, signature: str | None, return_annotation: str | None
) -> tuple[str | None, str | None] | None:
    """``autodoc-process-signature``: a dataclass field's ``<factory>`` default shown as the call that makes it.

    ``fields: tuple[str, ...] = <factory>`` is not Python, so Sphinx would parse the whole signature loosely (and
    Sphinx 9 then links pieces such as ``tuple[str``); ``= tuple()`` is what the default is.
    """
    if what != "class" or not signature or "<factory>" not in signature or not dataclasses.is_dataclass(obj):
        return None
    calls = iter(
        f"{getattr(f.default_factory, '__qualname__', 'factory')}()"
        for f in dataclasses.fields(obj)
        if f.init and f.default_factory is not dataclasses.MISSING
    )
    return re.sub("<factory>", lambda _: next(calls, "..."), signature), return_annotation


# ------------------------------------------------------------------------------------ sections of other pages
def _is_missing_section(app: Sphinx, docname: str) -> bool:
    return docname in app.config.fastdata_other_pages and docname not in app.env.found_docs


def drop_missing_sections(app: Sphinx, docname: str, source: list[str]) -> None:
    """``source-read``: the root toctree's lines naming a section this build does not have are left out.

    The pages ``fastdata_other_pages`` (conf.py) names are written by other owners; a branch may not have one
    yet. Any other missing entry stays a warning.
    """
    if docname != app.config.root_doc:
        return
    lines = source[0].split("\n")
    source[0] = "\n".join(line for line in lines if not _is_missing_section(app, line.strip()))


def reread_root(app: Sphinx, env: Any, added: set[str], changed: set[str], removed: set[str]) -> list[str]:
    """``env-get-outdated``: the root page is read again when pages come or go (its toctree and cards follow)."""
    return [app.config.root_doc] if added or removed else []


def unlinked_section(app: Sphinx, env: Any, node: Any, contnode: nodes.Element) -> nodes.Element | None:
    """``missing-reference``: a ``{doc}`` link to another owner's page this build lacks is shown as plain text."""
    if node.get("refdomain") != "std" or node.get("reftype") != "doc":
        return None
    target = node["reftarget"]
    docname = target[1:] if target.startswith("/") else docname_join(node["refdoc"], target)
    if _is_missing_section(app, docname):
        return contnode
    return None


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the directives and the resolver."""
    app.add_directive("fastdata-cli", CliDirective)
    app.add_directive("fastdata-raises", RaisesDirective)
    app.add_directive("fastdata-cards", CardsDirective)
    app.add_directive("fastdata-modules", ModulesDirective)
    app.add_config_value("fastdata_other_pages", [], "env", [list])
    app.add_config_value("fastdata_automodules", [], "env", [list])
    app.connect("autodoc-process-signature", factory_defaults)
    app.connect("autodoc-process-docstring", examples_using)
    app.connect("missing-reference", resolve_public)
    app.connect("missing-reference", unlinked_section)
    app.connect("source-read", drop_missing_sections)
    app.connect("env-get-outdated", reread_root)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
