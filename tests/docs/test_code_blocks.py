"""Every ```python block of README.md and of docs/**/*.md runs (the documentation conventions, issue 37).

The blocks of one file run in order, in one namespace, with the working directory a fresh temporary folder that
holds ``images/`` (an image folder ``images/<class>/<n>.jpg``: 2 classes x 40 small JPEGs, 64-160 px a side) and
``packed/`` (that folder packed by ``fastdata pack images packed --format tfrecord``, every other option the
CLI's default; ``packed/manifest.json`` is inside). Both are made once per session and copied for each file.

A block that cannot run here (it needs CUDA, a cluster, the network, hours) is preceded, on the line right before
its fence, by ``<!-- not-run: <reason> -->``: it is only compiled. ``bash``/``console`` blocks are never run.
A failure names the file and the line of the block's fence; the traceback shows the file's own line numbers.
"""

from __future__ import annotations

import re
import shutil
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from markdown_it import MarkdownIt
from PIL import Image

from tests.images import natural_image

ROOT = Path(__file__).resolve().parents[2]
#: Markdown under docs/ that Sphinx renders as a page; build outputs and generated galleries are not pages we write.
SKIP_PARTS = {"_build", "_static", "_ext", "_templates", "tutorials"}
RUN_LANGUAGES = {"python", "py", "python3"}
NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(?P<reason>\S.*?)\s*-->$")
CLASSES = ("cat", "dog")
IMAGES_PER_CLASS = 40


@dataclass(frozen=True)
class Block:
    """One fenced Python block: its 1-based fence line, its source, and the reason it is not run (if any)."""

    line: int
    source: str
    not_run: str | None


def doc_files(root: Path = ROOT) -> list[Path]:
    """README.md, then every Markdown page under docs/ (sorted), as paths relative to ``root``."""
    pages = sorted(
        p.relative_to(root) for p in (root / "docs").rglob("*.md") if not SKIP_PARTS & set(p.relative_to(root).parts)
    )
    return [Path("README.md"), *pages]


def python_blocks(text: str) -> list[Block]:
    """The fenced Python blocks of a Markdown text, each with the ``not-run`` reason written on the line before it.

    Parsed with markdown-it (the parser MyST uses), so fences inside lists and block quotes count and a ```python
    line inside another fence does not.
    """
    lines = text.splitlines()
    blocks = []
    for token in MarkdownIt("commonmark").parse(text):
        if token.type != "fence" or token.map is None:
            continue
        language = token.info.split(maxsplit=1)[0].lower() if token.info.strip() else ""
        if language not in RUN_LANGUAGES:
            continue
        start = token.map[0]  # 0-based line of the opening fence
        before = lines[start - 1].strip() if start > 0 else ""
        marker = NOT_RUN.match(before)
        blocks.append(Block(start + 1, token.content, marker.group("reason") if marker else None))
    return blocks


def run_blocks(path: Path, text: str, namespace: dict) -> None:
    """Compile every block of ``text`` and run those without a ``not-run`` marker, in order, in ``namespace``.

    Raises:
        AssertionError: naming ``path`` and the fence line of the first block that does not compile or raises.
    """
    for block in python_blocks(text):
        # Padded so that the traceback's line numbers are the Markdown file's own.
        padded = "\n" * block.line + block.source
        try:
            code = compile(padded, str(path), "exec")
        except SyntaxError as exc:
            raise AssertionError(f"{path}, the block at line {block.line} does not compile: {exc}") from None
        if block.not_run is not None:
            continue
        try:
            exec(code, namespace)
        except BaseException as exc:  # noqa: BLE001 - any failure of a documented example is the test's failure
            if isinstance(exc, KeyboardInterrupt):
                raise
            shown = "".join(traceback.format_exception(exc)[-6:])
            raise AssertionError(
                f"{path}, the block at line {block.line} raised {type(exc).__name__}: {exc}\n"
                f"(mark it with <!-- not-run: reason --> on the line before its fence if it cannot run here)\n"
                f"{shown}"
            ) from None


def make_images(folder: Path, seed: int = 0) -> None:
    """``folder/<class>/<n>.jpg``: 2 classes x 40 photo-like JPEGs, 64 to 160 pixels a side."""
    rng = np.random.default_rng(seed)
    for name in CLASSES:
        (folder / name).mkdir(parents=True)
        for n in range(IMAGES_PER_CLASS):
            h, w = (int(v) for v in rng.integers(64, 161, size=2))
            Image.fromarray(natural_image(rng, h, w)).save(folder / name / f"{n}.jpg", quality=90)


@pytest.fixture(scope="session")
def docs_workspace(tmp_path_factory) -> Path:
    """A folder with ``images/`` and ``packed/`` (packed by the CLI: ``fastdata pack images packed --format
    tfrecord``), made once per session; each file's blocks run in a copy."""
    from fastdata.cli import main

    root = tmp_path_factory.mktemp("docs-workspace")
    make_images(root / "images")
    code = main(["pack", str(root / "images"), str(root / "packed"), "--format", "tfrecord", "--no-progress"])
    assert code in (0, None), f"fastdata pack exited with {code}"
    assert (root / "packed" / "manifest.json").is_file()
    return root


def files_with_blocks() -> list[Path]:
    return [p for p in doc_files() if python_blocks((ROOT / p).read_text(encoding="utf-8"))]


@pytest.mark.parametrize("path", files_with_blocks(), ids=str)
def test_every_python_block_runs(path: Path, docs_workspace: Path, tmp_path: Path, monkeypatch) -> None:
    for name in ("images", "packed"):
        shutil.copytree(docs_workspace / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    run_blocks(path, (ROOT / path).read_text(encoding="utf-8"), {"__name__": "__main__"})


def test_the_readme_quickstart_is_run() -> None:
    """The README has Python blocks, and at least one of them is run (not only compiled)."""
    blocks = python_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert [b for b in blocks if b.not_run is None], "README.md has no Python block that runs"


# -- the runner itself ---------------------------------------------------------------------------------------------

SAMPLE = """# A page

Text.

```python
x = 1
```

- a list item:

  ```python
  x += 1
  ```

```bash
this is not python
```

<!-- not-run: needs a GPU -->
```python
import torch
torch.cuda.set_device(0)
```

```python
assert x == 2, x
y = open("images/cat/0.jpg", "rb").read()
```
"""


def test_blocks_are_found_with_their_lines_and_markers() -> None:
    blocks = python_blocks(SAMPLE)
    assert [(b.line, b.not_run) for b in blocks] == [(5, None), (11, None), (20, "needs a GPU"), (25, None)]


def test_blocks_share_one_namespace_and_not_run_is_only_compiled(docs_workspace, tmp_path, monkeypatch) -> None:
    shutil.copytree(docs_workspace / "images", tmp_path / "images")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    run_blocks(Path("page.md"), SAMPLE, namespace)  # the CUDA block would raise here: it is compiled, not run
    assert namespace["x"] == 2 and namespace["y"][:2] == b"\xff\xd8"


def test_a_failing_block_names_the_file_and_the_line() -> None:
    text = "Intro.\n\n```python\na = 1\n```\n\n```python\n\nraise ValueError('renamed argument')\n```\n"
    with pytest.raises(AssertionError, match=r"page\.md, the block at line 7 raised ValueError: renamed argument"):
        run_blocks(Path("page.md"), text, {})
    with pytest.raises(AssertionError) as info:
        run_blocks(Path("page.md"), text, {})
    assert 'File "page.md", line 9' in str(info.value)  # the traceback points at the Markdown file's own line


def test_a_not_run_block_must_still_compile() -> None:
    text = "<!-- not-run: needs a cluster -->\n```python\ndef f(:\n```\n"
    with pytest.raises(AssertionError, match=r"page\.md, the block at line 2 does not compile"):
        run_blocks(Path("page.md"), text, {})


def test_the_marker_must_be_on_the_line_right_before_the_fence() -> None:
    text = "<!-- not-run: too far -->\n\n```python\nraise RuntimeError('runs')\n```\n"
    assert python_blocks(text)[0].not_run is None
    with pytest.raises(AssertionError, match="RuntimeError: runs"):
        run_blocks(Path("page.md"), text, {})


def test_the_files_are_the_readme_and_the_docs_pages(tmp_path) -> None:
    for page in ("docs/index.md", "docs/how-to/a.md", "docs/_build/html/x.md", "docs/tutorials/t.md"):
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text("x")
    assert doc_files(tmp_path) == [Path("README.md"), Path("docs/how-to/a.md"), Path("docs/index.md")]
