"""Run PyTorch's own DataLoader tests (``test/test_dataloader.py``) against ``torch.utils.data.DataLoader`` and
against ``fastdata.DataLoaderX``, and compare.

The file is PyTorch's, not ours: by default the copy under ``tests/vendor/torch/`` (its README names the commit and
says how to get it); pass another path to run that one. Nothing is downloaded here.

The shim is one line in every Python process of the run (the test process and the worker/spawned children,
through a generated ``sitecustomize``): ``torch.utils.data.DataLoader = fastdata.DataLoaderX``, so the test
module's ``from torch.utils.data import DataLoader`` gets DataLoaderX. The file runs from a scratch folder of its
own (with an empty ``pytest.ini``), so neither this repository's ``conftest.py`` nor its pytest settings apply.
The two loaders run side by side. Tests in :data:`EXCLUDED` are deselected for both, each with its reason; every
other test that passes with torch's DataLoader must pass with DataLoaderX. Many of the file's tests wait on fixed
timeouts (a 60 s join of a spawned process), which a loaded machine can miss: a test that fails only under
DataLoaderX runs once more, alone, and counts as failed only if it fails again.

Usage::

    python tools/torch_dataloader_suite.py                          # the vendored file, both loaders, compared
    python tools/torch_dataloader_suite.py PATH/test_dataloader.py --loader fastdata -- -k TestDataLoader -x
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENDORED = REPO / "tests" / "vendor" / "torch" / "test_dataloader.py"
_SLOW = "slow (CI budget: the whole file under both loaders in < 3 min on 2 cores)"

# test id (as pytest names it, relative to the file) -> why it is deselected. Nothing is excluded because DataLoaderX
# fails it: only tests that take tens of seconds each (measured under torch's own DataLoader, on 2 shared cores) and
# whose ground is covered by cheaper tests of the same file.
EXCLUDED: dict[str, str] = {
    "TestIndividualWorkerQueue::test_ind_worker_queue": (
        f"{_SLOW}: 15 loaders of 1-5 workers, 170-240 s; the round-robin worker order it checks is torch's "
        "iterator's own (DataLoaderX runs it unchanged) and test_sequential_workers checks the order with 4 workers"
    ),
    "IntegrationTestDataLoaderDataPipe::test_shuffler_iterdatapipe": (
        f"{_SLOW}: 30 loaders with spawned workers, 90-220 s; DataPipes are deprecated in torch, and the "
        "IterableDataset paths it takes are covered by test_iterable_style_dataset and "
        "test_chain_iterable_style_dataset"
    ),
    "TestDataLoaderPersistentWorkers::test_iterable_style_dataset": (
        f"{_SLOW}: 100-140 s, mostly joins that wait for torch's persistent iterator to be garbage collected; "
        "TestDataLoader::test_iterable_style_dataset runs the same checks without persistent workers"
    ),
    "TestDataLoader::test_worker_seed_reproducibility": (
        f"{_SLOW}: 2 loaders of 6 synchronized workers, 35 s; test_worker_seed and test_shuffle_reproducibility "
        "cover worker seeds and seeded orders"
    ),
    "TestDataLoaderPersistentWorkers::test_worker_seed_reproducibility": (
        f"{_SLOW}: 37-59 s; as TestDataLoader::test_worker_seed_reproducibility"
    ),
}

SHIM = """\
import os
if os.environ.get("FASTDATA_TORCH_SUITE_LOADER") == "fastdata":
    import torch.utils.data
    import fastdata
    torch.utils.data.DataLoader = fastdata.DataLoaderX
"""


def start(
    test_file: Path, loader: str, pytest_args: list[str], report: Path, scratch: Path, only: bool = False
) -> subprocess.Popen:
    """Start the file under ``loader`` (``torch`` or ``fastdata``) in a scratch folder of its own.

    ``only``: ``pytest_args`` name the tests to run (no whole-file run, no deselection).
    """
    scratch.mkdir(parents=True)
    shutil.copyfile(test_file, scratch / test_file.name)
    (scratch / "pytest.ini").write_text("[pytest]\n")  # stops pytest's search for settings (the repository's)
    (scratch / "sitecustomize.py").write_text(SHIM)
    env = {
        **os.environ,
        "FASTDATA_TORCH_SUITE_LOADER": loader,
        "PYTHONPATH": os.pathsep.join([str(scratch), str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    deselect = [a for name in EXCLUDED for a in ("--deselect", f"{test_file.name}::{name}")]
    what = [] if only else [test_file.name, *deselect]
    command = [
        sys.executable,
        "-m",
        "pytest",
        *what,
        "-q",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        ".",
        f"--junitxml={report}",
        *pytest_args,
    ]
    return subprocess.Popen(command, env=env, cwd=scratch)


def rerun(test_file: Path, tests: list[str], pytest_args: list[str], report: Path, timeout: float) -> dict[str, str]:
    """Run ``tests`` once more under DataLoaderX, one pytest process for all of them; return their outcomes."""
    with tempfile.TemporaryDirectory(prefix="fastdata-torch-suite-") as scratch:
        run = start(
            test_file,
            "fastdata",
            [*pytest_args, *(f"{test_file.name}::{t}" for t in tests)],
            report.resolve(),
            Path(scratch, "rerun"),
            only=True,
        )
        try:
            run.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait()
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
    parser.add_argument(
        "test_file",
        type=Path,
        nargs="?",
        default=VENDORED,
        help="torch's test/test_dataloader.py (default: the vendored copy)",
    )
    parser.add_argument("--loader", choices=("both", "torch", "fastdata"), default="both")
    parser.add_argument("--out", type=Path, default=Path("torch-suite-reports"), help="where the junit XML goes")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds before a run is stopped (a failure)")
    parser.add_argument(
        "--no-rerun",
        dest="rerun",
        action="store_false",
        help="do not run the tests that failed only under DataLoaderX once more, alone",
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    after = argv.index("--") if "--" in argv else len(argv)  # what follows -- goes to pytest as it is
    args, unknown = parser.parse_known_args(argv[:after])
    pytest_args = unknown + argv[after + 1 :]
    test_file = args.test_file.resolve()
    if not test_file.is_file():
        parser.error(f"{test_file} is not a file: pass torch's test/test_dataloader.py (tests/vendor/torch/README.md)")
    args.out.mkdir(parents=True, exist_ok=True)
    loaders = ("torch", "fastdata") if args.loader == "both" else (args.loader,)
    with tempfile.TemporaryDirectory(prefix="fastdata-torch-suite-") as scratch:
        runs = {
            name: start(test_file, name, pytest_args, args.out.resolve() / f"{name}.xml", Path(scratch, name))
            for name in loaders
        }
        timed_out = []
        for name, run in runs.items():
            try:
                run.wait(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                run.kill()
                run.wait()
                timed_out.append(name)
    results = {name: outcomes(args.out / f"{name}.xml") for name in loaders}
    print(f"\nexcluded ({len(EXCLUDED)}):")
    for name, reason in EXCLUDED.items():
        print(f"  {name}: {reason}")
    for name in loaders:
        print(f"{name:>8}: {counts(results[name])}" + (" (stopped: timeout)" if name in timed_out else ""))
    if timed_out or not all(results.values()):
        print(f"no complete report from {timed_out or [n for n in loaders if not results[n]]}")
        return 1
    if len(loaders) < 2:
        return 0 if all(v != "failed" for v in results[loaders[0]].values()) else 1
    regressions = sorted(
        t for t, v in results["torch"].items() if v == "passed" and results["fastdata"].get(t) != "passed"
    )
    if regressions and args.rerun:  # many of these tests wait on fixed timeouts (60 s joins): tell load from a failure
        print(f"again under DataLoaderX, alone: {regressions}")
        again = rerun(test_file, regressions, pytest_args, args.out / "fastdata-rerun.xml", args.timeout)
        regressions = [t for t in regressions if again.get(t) != "passed"]
    print(f"passed with torch's DataLoader but not with DataLoaderX: {len(regressions)}")
    for name in regressions:
        print(f"  {name}: {results['fastdata'].get(name, 'not run')}")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
