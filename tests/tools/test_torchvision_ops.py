"""After the set-up, a plain ``python3`` imports torchvision and Lightning (which imports it) without the tests' shim:
``tools/torchvision_ops.py``'s start-up hook declares torchvision's op schemas where its compiled ops cannot load."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def _plain_env() -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH pointing into this repository."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}


def test_torchvision_and_lightning_import_in_a_plain_python(tmp_path):
    # what a user's Lightning script does first, in the environment tools/setup.sh leaves (test extra)
    done = subprocess.run(
        [sys.executable, "-c", "import torchvision, lightning; print(torchvision.__version__)"],
        cwd=tmp_path,
        env=_plain_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_installed_hook_declares_the_schemas_on_import_only(tmp_path):
    site_dir = tmp_path / "site"
    subprocess.run(
        [sys.executable, str(TOOLS / "torchvision_ops.py"), str(site_dir)], check=True, capture_output=True, timeout=120
    )
    assert sorted(p.name for p in site_dir.iterdir()) == [
        "_fastdata_torchvision_ops.py",
        "fastdata_torchvision_ops.pth",
    ]
    # -S: only this folder's .pth files run (site-packages is on the path for torch, its .pth files are not read)
    code = f"""
import site, sys
sys.path.insert(0, {str(site_dir)!r})  # ahead of site-packages, which may hold an installed copy
site.addsitedir({str(site_dir)!r})
import _fastdata_torchvision_ops as hook
assert hook.__file__.startswith({str(site_dir)!r}), hook.__file__
assert "torch" not in sys.modules, "the start-up hook must not import torch"
import importlib.util, torch
assert importlib.util.find_spec("torchvision") is not None
assert not hasattr(torch.ops.torchvision, "nms"), "a probe must declare nothing (an older tests' shim declares then)"
import torchvision, lightning
from torchvision.transforms.v2 import functional
import torch
assert hasattr(torch.ops.torchvision, "nms")
assert not any(type(f).__name__ == "_Hook" for f in sys.meta_path), "the hook removes itself"
"""
    env = {**_plain_env(), "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    done = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    subprocess.run(
        [sys.executable, str(TOOLS / "torchvision_ops.py"), "--uninstall", str(site_dir)], check=True, timeout=120
    )
    assert list(site_dir.iterdir()) == []


def test_declare_is_a_no_op_once_the_schemas_exist():
    import torch
    import torchvision  # noqa: F401 - imports (the shim or the start-up hook declared what it needs)

    from tests.torchvision_shim import torchvision_ops

    assert hasattr(torch.ops.torchvision, "nms") and hasattr(torch.ops.torchvision, "qnms")
    assert torchvision_ops.declare() is False  # declaring twice would raise "registered multiple times"
