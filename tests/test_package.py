"""The package's shape: what ``import fastdata`` loads, module sizes, and names that do not shadow modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import fastdata

PACKAGE = Path(fastdata.__file__).parent


def test_import_fastdata_loads_no_benchmark_dali_or_plotting():
    code = ("import sys, fastdata, fastdata.packing; "
            "print(sorted(m for m in sys.modules if m.startswith(('fastdata.bench', 'fastdata.dali', 'nvidia', "
            "'matplotlib', 'boto3', 'botocore', 's3fs', 'gcsfs', 'fsspec', 'obstore', 'urllib3'))))")
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
