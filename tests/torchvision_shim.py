"""Make ``import torchvision`` work in the tests even where ``tools/setup.sh`` did not install its start-up hook.

``tools/torchvision_ops.py`` declares torchvision's op schemas when its compiled library cannot load (this
project's torch is a CPU build, the torchvision wheel a CUDA one); ``tools/setup.sh`` installs it into site-packages
so any script can import torchvision and Lightning. The tests run it here too, before any test imports
torchvision, so an environment set up before that hook existed still runs them. A no-op where the compiled ops load
or the schemas are declared already.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "tools" / "torchvision_ops.py"
_spec = importlib.util.spec_from_file_location("tools_torchvision_ops", _PATH)
torchvision_ops = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(torchvision_ops)


def install() -> None:
    """Declare torchvision's op schemas when its compiled library cannot load; a no-op otherwise."""
    torchvision_ops.declare()


install()
