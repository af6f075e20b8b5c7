"""Make ``import torchvision`` work beside a torch it was not built against (the test set-up installs it --no-deps).

torchvision's Python code registers fake kernels for its C++ ops at import time; when its compiled ``_C``
library cannot load (this project's torch is a CPU build, the torchvision wheel a CUDA one), those ops have no
schema and the import fails. Declaring the two schemas the import needs lets the pure-Python parts load
(``transforms.v2.functional``, which the tests compare against); torchvision's own detection ops stay unavailable.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_library: torch.library.Library | None = None


def _compiled_ops_load(folder: Path) -> bool:
    for path in sorted(folder.glob("_C*.so")) + sorted(folder.glob("_C*.pyd")):
        try:
            torch.ops.load_library(str(path))
            return True
        except (OSError, RuntimeError):
            return False
    return False


def install() -> None:
    """Declare torchvision's op schemas when its compiled library cannot load; a no-op otherwise."""
    global _library
    spec = importlib.util.find_spec("torchvision")
    if _library is not None or spec is None or not spec.submodule_search_locations:
        return
    if _compiled_ops_load(Path(next(iter(spec.submodule_search_locations)))):
        return
    _library = torch.library.Library("torchvision", "DEF")
    for schema in _SCHEMAS:
        _library.define(schema)


install()
