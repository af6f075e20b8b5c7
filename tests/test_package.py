"""The package's shape: what ``import fastdata`` loads, module sizes, and names that do not shadow modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import fastdata

PACKAGE = Path(fastdata.__file__).parent


def test_import_fastdata_loads_no_benchmark_dali_or_plotting():
    code = (
        "import sys, fastdata, fastdata.packing; "
        "print(sorted(m for m in sys.modules if m.startswith(('fastdata.bench', 'fastdata.dali', 'nvidia', "
        "'matplotlib', 'boto3', 'botocore', 's3fs', 'gcsfs', 'fsspec', 'obstore', 'urllib3'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_benchmark_and_packing_import():
    code = "import fastdata, fastdata.packing, fastdata.bench, fastdata.loader, fastdata.decode, fastdata.formats"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_module_is_under_400_lines():
    sizes = {p.relative_to(PACKAGE).as_posix(): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n >= 400} == {}


def test_public_api_is_sorted_and_no_function_shadows_a_module():
    assert fastdata.__all__ == sorted(fastdata.__all__)
    modules = {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir() if p.is_dir()}
    for name in fastdata.__all__:
        obj = getattr(fastdata, name)
        if callable(obj) and not isinstance(obj, type(fastdata)):
            assert name not in modules, f"fastdata.{name} shadows the module fastdata/{name}"


ARCHITECTURE = (PACKAGE.parent / "ARCHITECTURE.md").read_text(encoding="utf-8")


def _docstring(path: Path) -> str:
    import ast

    return ast.get_docstring(ast.parse(path.read_text())) or ""


def test_at_most_six_modules_at_the_top_level():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 6, top


#: Past this many lines a module says why it is one piece. The budget was 330 lines until the code was formatted
#: with ruff (which puts each argument of a long call on a line of its own): the same code took 9.7% more lines
#: over the package (26,999 -> 29,620), so the budget grew in proportion, to 360.
SAYS_WHY_AFTER = 360


def test_a_module_over_360_lines_says_why_it_is_one_piece():
    long = {
        p.relative_to(PACKAGE).as_posix(): p
        for p in PACKAGE.rglob("*.py")
        if len(p.read_text().splitlines()) > SAYS_WHY_AFTER
    }
    assert {name for name, p in long.items() if "indivisible" not in _docstring(p)} == set()


def test_architecture_describes_every_folder_and_module():
    """Each folder of the package as `fastdata/NAME/` and each module by its path inside the package."""
    folders = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE)
    missing = [
        f"fastdata/{Path(f).parent.as_posix()}/"
        for f in folders
        if f"`fastdata/{Path(f).parent.as_posix()}/`" not in ARCHITECTURE
    ]
    modules = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")
    missing += [m for m in modules if f"`{m}`" not in ARCHITECTURE and f"`fastdata/{m}`" not in ARCHITECTURE]
    assert missing == []
