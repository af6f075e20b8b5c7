"""Let ``import torchvision`` (and Lightning, which imports it) work beside a torch its wheel was not built against.

The test set-up installs torchvision ``--no-deps`` beside the installed torch (this project's torch is a CPU build,
the torchvision wheel a CUDA one). torchvision's Python code registers fake kernels for its C++ ops at import time;
when its compiled ``_C`` library cannot load, the ops ``torchvision::nms`` and ``torchvision::qnms`` have no schema
and ``import torchvision`` fails with ``operator torchvision::nms does not exist``. Declaring the two schemas lets
the pure-Python parts load (``transforms.v2``, what Lightning and the tests use); torchvision's own detection ops
stay unavailable (calling ``torchvision.ops.nms`` raises, as it would without the schemas).

``python3 tools/torchvision_ops.py [SITE_DIR]`` (run by ``tools/setup.sh``) copies this file into ``SITE_DIR``
(default: the running Python's site-packages) as ``_fastdata_torchvision_ops.py``, next to
``fastdata_torchvision_ops.pth``, which calls :func:`install_hook` when the interpreter starts. The hook is one
``sys.meta_path`` entry and imports nothing; the first ``import torchvision`` runs :func:`declare` once (before
torchvision's first line) and removes the hook (a mere ``importlib.util.find_spec("torchvision")`` declares nothing).
:func:`declare` does nothing when torchvision's compiled library loads or the schemas exist already. ``python3
tools/torchvision_ops.py --uninstall [SITE_DIR]`` removes both files.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import os
import shutil
import sys
import sysconfig

MODULE = "_fastdata_torchvision_ops"
PTH = "fastdata_torchvision_ops.pth"
SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_library = None  # the torch.library.Library holding the declarations, kept alive


def _compiled_ops_load(folder: str) -> bool:
    """Whether torchvision's compiled library in ``folder`` loads (it then declares the ops itself)."""
    import torch

    names = sorted(n for n in os.listdir(folder) if n.startswith("_C") and n.endswith((".so", ".pyd")))
    for name in names[:1]:
        try:
            torch.ops.load_library(os.path.join(folder, name))
            return True
        except (OSError, RuntimeError):
            return False
    return False


def declare(folder: str | None = None) -> bool:
    """Declare the schemas of ``torchvision::nms``/``qnms`` when torchvision's compiled ops cannot load.

    Args:
        folder: torchvision's package folder (default: found on ``sys.path`` without importing torchvision).

    Returns:
        True when this call declared them; False when torchvision is absent, its library loads, or they exist.
    """
    global _library
    if folder is None:
        spec = importlib.machinery.PathFinder.find_spec("torchvision")
        if spec is None or not spec.submodule_search_locations:
            return False
        folder = next(iter(spec.submodule_search_locations))
    import torch

    if hasattr(torch.ops.torchvision, "nms") or _compiled_ops_load(folder):
        return False
    library = torch.library.Library("torchvision", "FRAGMENT")
    for schema in SCHEMAS:
        library.define(schema)
    _library = library
    return True


class _Hook:
    """A ``sys.meta_path`` entry: the first import of ``torchvision`` runs :func:`declare` before torchvision's code.

    A probe (``importlib.util.find_spec("torchvision")``) declares nothing: the spec it gets has a loader that runs
    :func:`declare` only when the module is executed, then hands back to torchvision's own loader.
    """

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001 - importlib's finder protocol
        if name != "torchvision":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Declaring(spec.loader)
                return spec
        return None


class _Declaring:
    """torchvision's loader, preceded by :func:`declare` (once) when the module is executed."""

    def __init__(self, loader) -> None:  # noqa: ANN001
        self.loader = loader

    def create_module(self, spec):  # noqa: ANN001
        return self.loader.create_module(spec) if hasattr(self.loader, "create_module") else None

    def exec_module(self, module) -> None:  # noqa: ANN001
        remove_hook()
        module.__loader__ = module.__spec__.loader = self.loader  # torchvision sees its own loader
        with contextlib.suppress(Exception):  # never break an import: torchvision then reports its own error
            declare()
        self.loader.exec_module(module)


def install_hook() -> None:
    """Put the hook first on ``sys.meta_path`` (once); what the ``.pth`` file calls at start-up."""
    if "torchvision" not in sys.modules and not any(isinstance(f, _Hook) for f in sys.meta_path):
        sys.meta_path.insert(0, _Hook())


def remove_hook() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Hook)]


def install(site_dir: str | None = None) -> str:
    """Copy this file into ``site_dir`` (default: site-packages) with the ``.pth`` that runs it; return the folder."""
    site_dir = site_dir or sysconfig.get_paths()["purelib"]
    os.makedirs(site_dir, exist_ok=True)
    shutil.copyfile(os.path.abspath(__file__), os.path.join(site_dir, MODULE + ".py"))
    with open(os.path.join(site_dir, PTH), "w") as f:  # a .pth line starting with "import" is executed
        f.write(f"import {MODULE}; {MODULE}.install_hook()\n")
    return site_dir


def uninstall(site_dir: str | None = None) -> None:
    """Remove the ``.pth`` and the module copy from ``site_dir`` (default: site-packages)."""
    site_dir = site_dir or sysconfig.get_paths()["purelib"]
    for name in (PTH, MODULE + ".py"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(site_dir, name))


def main(argv: list[str]) -> int:
    if argv[:1] == ["--uninstall"]:
        uninstall(argv[1] if len(argv) > 1 else None)
        return 0
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print("usage: python3 tools/torchvision_ops.py [--uninstall] [SITE_DIR]", file=sys.stderr)
        return 2
    print(
        f"==> torchvision's op schemas declared on import when its compiled ops cannot load "
        f"({os.path.join(install(argv[0] if argv else None), PTH)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
