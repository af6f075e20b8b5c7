"""Shared fixtures: small but real image folders (odd sizes, grayscale, PNG, a corrupt file), packed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import tests.torchvision_shim  # noqa: F401 - before any test imports torchvision
from tests.images import ImageFolderInfo, make_image_folder


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory) -> ImageFolderInfo:
    """An image folder with good images of every awkward kind plus three bad files."""
    return make_image_folder(tmp_path_factory.mktemp("src"))


@pytest.fixture(scope="session")
def clean_image_folder(tmp_path_factory) -> ImageFolderInfo:
    """The same folder without bad files."""
    return make_image_folder(tmp_path_factory.mktemp("clean_src"), with_bad=False)


@pytest.fixture(scope="session", params=["tfrecord", "lmdb"])
def packed(request, image_folder, tmp_path_factory) -> tuple[Path, ImageFolderInfo]:
    """``image_folder`` packed in each format (5 samples per shard, so several shards)."""
    from fastdata.packing.packer import pack

    out = tmp_path_factory.mktemp(f"packed_{request.param}")
    pack(image_folder.root, out, format=request.param, samples_per_shard=5, workers=0, progress=False)
    return out, image_folder


def pytest_collection_modifyitems(config, items) -> None:
    """Every test marked ``cuda`` (and only those: ``pytest -m cuda`` selects them, as tools/gpu_check.sh does) is
    skipped in one place where no CUDA device is present."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


# A fresh machine set up by tools/setup.sh (extras `test`) has every tool and package the tests need, so the only
# acceptable skip is a missing CUDA device: any other skip fails the run (CI checks what a developer's machine does).
# FASTDATA_ALLOW_SKIPS=1 lets a developer without, say, the DALI wheel run the rest; CI never sets it.
ALLOW_SKIPS_ENV = "FASTDATA_ALLOW_SKIPS"
_bad_skips: list[tuple[str, str]] = []


def skip_reason(report) -> str:
    """The reason of a skipped test's report."""
    return report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)


def pytest_runtest_logreport(report) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = skip_reason(report)
        if "cuda" not in reason.lower():
            _bad_skips.append((report.nodeid, reason))


def pytest_sessionfinish(session, exitstatus) -> None:
    if _bad_skips and not os.environ.get(ALLOW_SKIPS_ENV) and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter) -> None:
    if _bad_skips and not os.environ.get(ALLOW_SKIPS_ENV):
        terminalreporter.write_line(
            f"FAIL: {len(_bad_skips)} test(s) skipped for a reason other than a missing CUDA device; install what "
            f"they need (bash tools/setup.sh test,dali) or set {ALLOW_SKIPS_ENV}=1 on a developer machine:",
            red=True,
        )
        for nodeid, reason in _bad_skips:
            terminalreporter.write_line(f"  {nodeid}: {reason}", red=True)
