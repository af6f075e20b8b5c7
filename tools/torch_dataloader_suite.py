"""Run PyTorch's own DataLoader tests (``test/test_dataloader.py`` of the installed torch's version) against
``torch.utils.data.DataLoader`` and against ``fastdata.DataLoaderX``, and compare.

The file is PyTorch's, not ours: get it for the installed version (e.g. from a PyTorch source checkout,
``git show v$(python -c 'import torch; print(torch.__version__.split("+")[0])'):test/test_dataloader.py``) and
pass its path. Nothing is downloaded here.

The shim is one line in every Python process of the run (the test process and the worker/spawned children,
through a generated ``sitecustomize``): ``torch.utils.data.DataLoader = fastdata.DataLoaderX``, so the test
module's ``from torch.utils.data import DataLoader`` gets DataLoaderX. Tests that cannot pass by design are
deselected, each with its reason (:data:`EXCLUDED`); every other test that passes with torch's DataLoader must
pass with DataLoaderX.

Usage::

    python tools/torch_dataloader_suite.py PATH/test_dataloader.py            # both loaders, then the comparison
    python tools/torch_dataloader_suite.py PATH/test_dataloader.py --loader fastdata -- -k TestDataLoader -x
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# test id (as pytest names it, relative to the file) -> why DataLoaderX cannot pass it by design: only tests that
# depend on the two documented default changes (pin_memory, persistent_workers) or read torch's private loader
# attributes belong here. Measured under torch 2.13.0 on the whole file (178 tests: 164 run, 14 skipped for CUDA,
# dill or PYTORCH_TEST_WITH_SLOW), none did: the tests pass both defaults explicitly or do not depend on them, and
# the private attributes they read (``_workers``, ``_auto_collation``, ``_iterator``) are torch's own.
EXCLUDED: dict[str, str] = {}

SHIM = """\
import os
if os.environ.get("FASTDATA_TORCH_SUITE_LOADER") == "fastdata":
    import torch.utils.data
    import fastdata
    torch.utils.data.DataLoader = fastdata.DataLoaderX
"""


def run(test_file: Path, loader: str, pytest_args: list[str], report: Path) -> dict[str, str]:
    """Run the file under ``loader`` (``torch`` or ``fastdata``); return {test id: outcome}."""
    with tempfile.TemporaryDirectory(prefix="fastdata-torch-suite-") as shim_dir:
        Path(shim_dir, "sitecustomize.py").write_text(SHIM)
        env = {**os.environ, "FASTDATA_TORCH_SUITE_LOADER": loader, "FASTDATA_ALLOW_SKIPS": "1",
               "PYTHONPATH": os.pathsep.join([shim_dir, str(REPO), os.environ.get("PYTHONPATH", "")])}
        deselect = [a for name in EXCLUDED for a in ("--deselect", f"{test_file.name}::{name}")]
        command = [sys.executable, "-m", "pytest", str(test_file), "-q", "-p", "no:cacheprovider",
                   "--rootdir", str(test_file.parent), f"--junitxml={report}", *deselect, *pytest_args]
        subprocess.run(command, env=env, cwd=test_file.parent)
    return outcomes(report)


def outcomes(report: Path) -> dict[str, str]:
    """{``Class::test``: ``passed`` | ``failed`` | ``skipped``} from a junit XML report."""
    results: dict[str, str] = {}
    if not report.exists():
        return results
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rpartition('.')[2]}::{case.get('name')}"
        tags = {child.tag for child in case}
        results[name] = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
    return results


def counts(results: dict[str, str]) -> str:
    return ", ".join(f"{sum(v == k for v in results.values())} {k}" for k in ("passed", "failed", "skipped"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("test_file", type=Path, help="torch's test/test_dataloader.py for the installed version")
    parser.add_argument("--loader", choices=("both", "torch", "fastdata"), default="both")
    parser.add_argument("--out", type=Path, default=Path("torch-suite-reports"), help="where the junit XML goes")
    args, pytest_args = parser.parse_known_args(argv)  # the rest (after --) goes to pytest
    pytest_args = [a for a in pytest_args if a != "--"]
    test_file = args.test_file.resolve()
    if not test_file.is_file():
        parser.error(f"{test_file} is not a file: pass torch's test/test_dataloader.py")
    args.out.mkdir(parents=True, exist_ok=True)
    loaders = ("torch", "fastdata") if args.loader == "both" else (args.loader,)
    results = {name: run(test_file, name, pytest_args, args.out / f"{name}.xml") for name in loaders}
    print(f"\nexcluded by design ({len(EXCLUDED)}):")
    for name, reason in EXCLUDED.items():
        print(f"  {name}: {reason}")
    for name in loaders:
        print(f"{name:>8}: {counts(results[name])}")
    if len(loaders) < 2:
        return 0 if all(v != "failed" for v in results[loaders[0]].values()) else 1
    regressions = sorted(t for t, v in results["torch"].items()
                         if v == "passed" and results["fastdata"].get(t) != "passed")
    print(f"passed with torch's DataLoader but not with DataLoaderX: {len(regressions)}")
    for name in regressions:
        print(f"  {name}: {results['fastdata'].get(name, 'not run')}")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
