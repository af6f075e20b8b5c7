"""The suite fails when a test is skipped for anything but a missing CUDA device (tests/conftest.py's guard)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_pytest(tmp_path: Path, body: str, **env: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_runtest_logreport, pytest_sessionfinish, pytest_terminal_summary\n"
    )
    (tmp_path / "test_some.py").write_text("import pytest\n" + body)
    environ = {k: v for k, v in os.environ.items() if k != "FASTDATA_ALLOW_SKIPS"}
    environ.update(PYTHONPATH=str(REPO), **env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


CUDA_SKIP = "@pytest.mark.skipif(True, reason='needs a CUDA device')\ndef test_gpu(): pass\n"
TOOL_SKIP = "def test_tool(): pytest.skip('cjpeg is needed')\n"


@pytest.mark.parametrize(
    ("body", "env", "code"),
    [
        (CUDA_SKIP, {}, 0),
        (CUDA_SKIP + TOOL_SKIP, {}, 1),
        (CUDA_SKIP + TOOL_SKIP, {"FASTDATA_ALLOW_SKIPS": "1"}, 0),
    ],
)
def test_only_a_missing_cuda_device_may_skip(tmp_path, body, env, code):
    done = run_pytest(tmp_path, body, **env)
    assert done.returncode == code, done.stdout + done.stderr
    assert ("test_tool: Skipped: cjpeg is needed" in done.stdout) == (code == 1)
