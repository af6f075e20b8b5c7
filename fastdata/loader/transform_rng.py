"""The ``torch.Generator`` objects a batch transform draws from, found by walking it, and their states.

:class:`~fastdata.DataPrefetcher` records them in its ``state_dict()`` so that a resumed run's random batch
transforms (``RandomHorizontalFlip``, ``RandomResizedCrop``, ``ColorJitter``, ``Mixup``/``CutMix``,
``RandomErasing``, the augmentation policies, ...) draw what the uninterrupted run drew. The walk follows
attributes, lists, tuples and dicts (``Compose``'s transforms, ``MixupCutmix``'s parts, any object's
attributes) down to every attribute that is a ``torch.Generator``; a generator shared by several transforms
is recorded once, under the first path that reaches it.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from fastdata.loader.resume import encode_state, get_rng_states

__all__ = ["generator_states", "transform_generators"]

_MAX_DEPTH = 8  # Compose(MixupCutmix(...)) is 3 deep; nothing a transform holds needs more
_LEAVES = (
    torch.Tensor,
    str,
    bytes,
    int,
    float,
    complex,
    bool,
    type(None),
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    torch.device,
    torch.dtype,
)


def transform_generators(transform: Any) -> dict[str, torch.Generator]:
    """Every ``torch.Generator`` reachable from ``transform``, by attribute path (e.g. ``"transforms.0.generator"``).

    Args:
        transform: a batch transform (or None).

    Returns:
        ``{path: generator}`` in the order the walk meets them; empty when there is none.
    """
    found: dict[str, torch.Generator] = {}
    seen: set[int] = set()

    def walk(obj: Any, path: str, depth: int) -> None:
        if isinstance(obj, torch.Generator):
            if all(g is not obj for g in found.values()):
                found[path or "generator"] = obj
            return
        if depth > _MAX_DEPTH or isinstance(obj, _LEAVES) or id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, dict):
            items = [(str(k), v) for k, v in obj.items()]
        elif isinstance(obj, (list, tuple)):
            items = [(str(i), v) for i, v in enumerate(obj)]
        else:
            items = list(getattr(obj, "__dict__", {}).items())
        for name, value in items:
            walk(value, f"{path}.{name}" if path else name, depth + 1)

    walk(transform, "", 0)
    return found


def generator_states(
    generators: dict[str, torch.Generator], taken: dict[str, torch.Tensor] | None = None
) -> dict[str, str]:
    """The generators' states as plain strings: now, or as ``taken`` earlier (``{path: Generator.get_state()}``)."""
    if taken is None:
        return get_rng_states(generators)
    return {name: encode_state(taken[name]) for name in generators}
