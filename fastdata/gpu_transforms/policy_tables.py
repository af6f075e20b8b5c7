"""The policies' op tables and magnitude definitions.

Timm's RandAugment ops with their magnitude-to-argument maps,
torchvision's magnitude bins and arguments (RandAugment, AutoAugment, TrivialAugmentWide) and AutoAugment's ImageNet
sub-policies.
"""

from __future__ import annotations

import torch

from fastdata.gpu_transforms.plan import OP_NAMES, signed
from fastdata.transforms.policy_tables import TV_IMAGENET_POLICY


# timm's RandAugment ops, in timm's order: (name, op, argument of the magnitude m in [0, mmax] and a sign coin)
def _enhance(m, neg):
    return m / 10 * 1.8 + 0.1


def _enhance_inc(m, neg):
    return torch.clamp(1.0 + signed(m / 10 * 0.9, neg), min=0.1)


_TIMM_OPS = {
    "AutoContrast": ("autocontrast", None),
    "Equalize": ("equalize", None),
    "Invert": ("invert", None),
    "Rotate": ("rotate", lambda m, neg: signed(m / 10 * 30, neg)),
    "Posterize": ("posterize", lambda m, neg: torch.floor(m / 10 * 4)),
    "PosterizeIncreasing": ("posterize", lambda m, neg: 4 - torch.floor(m / 10 * 4)),
    "Solarize": ("solarize", lambda m, neg: torch.clamp(torch.floor(m / 10 * 256), max=256)),
    "SolarizeIncreasing": ("solarize", lambda m, neg: 256 - torch.clamp(torch.floor(m / 10 * 256), max=256)),
    "SolarizeAdd": ("solarize_add", lambda m, neg: torch.clamp(torch.floor(m / 10 * 110), max=128)),
    "Color": ("color", _enhance),
    "ColorIncreasing": ("color", _enhance_inc),
    "Contrast": ("contrast", _enhance),
    "ContrastIncreasing": ("contrast", _enhance_inc),
    "Brightness": ("brightness", _enhance),
    "BrightnessIncreasing": ("brightness", _enhance_inc),
    "Sharpness": ("sharpness", _enhance),
    "SharpnessIncreasing": ("sharpness", _enhance_inc),
    "ShearX": ("shear_x", lambda m, neg: signed(m / 10 * 0.3, neg)),
    "ShearY": ("shear_y", lambda m, neg: signed(m / 10 * 0.3, neg)),
    "TranslateXRel": ("translate_x", None),
    "TranslateYRel": ("translate_y", None),  # scaled by the image size
}
_RAND_OPS = (
    "AutoContrast",
    "Equalize",
    "Invert",
    "Rotate",
    "Posterize",
    "Solarize",
    "SolarizeAdd",
    "Color",
    "Contrast",
    "Brightness",
    "Sharpness",
    "ShearX",
    "ShearY",
    "TranslateXRel",
    "TranslateYRel",
)
_RAND_INCREASING = {
    "Posterize": "PosterizeIncreasing",
    "Solarize": "SolarizeIncreasing",
    "Color": "ColorIncreasing",
    "Contrast": "ContrastIncreasing",
    "Brightness": "BrightnessIncreasing",
    "Sharpness": "SharpnessIncreasing",
}


def _bins(name: str, num_bins: int, height: int, width: int, wide: bool) -> torch.Tensor | None:
    """Torchvision's magnitude bins of op ``name`` (AutoAugment's, or TrivialAugmentWide's when ``wide``)."""
    lin = lambda hi, lo=0.0: torch.linspace(lo, hi, num_bins).double()  # noqa: E731 - float32 bins, as torchvision
    if name in ("shear_x", "shear_y"):
        return lin(0.99 if wide else 0.3)
    if name in ("translate_x", "translate_y"):
        return lin(32.0) if wide else lin(150.0 / 331.0 * (width if name == "translate_x" else height))
    if name == "rotate":
        return lin(135.0 if wide else 30.0)
    if name in ("brightness", "color", "contrast", "sharpness"):
        return lin(0.99 if wide else 0.9)
    if name == "posterize":
        return (8 - (torch.arange(num_bins) / ((num_bins - 1) / (6 if wide else 4)))).round().double()
    if name == "solarize":
        return lin(0.0, 1.0) * 255.0
    return None


_SIGNED = frozenset(
    {"shear_x", "shear_y", "translate_x", "translate_y", "rotate", "brightness", "color", "contrast", "sharpness"}
)


def _torchvision_arg(name: str, magnitude: torch.Tensor, negate: torch.Tensor) -> torch.Tensor:
    """Torchvision's argument of op ``name`` for a bin's magnitude (signed ops negated where ``negate``)."""
    value = signed(magnitude, negate) if name in _SIGNED else magnitude
    if name in ("translate_x", "translate_y"):
        return torch.trunc(value)
    if name in ("brightness", "color", "contrast", "sharpness"):
        return 1.0 + value
    return value


#: AutoAugment's ImageNet policy (torchvision's 25 pairs, :data:`fastdata.transforms.policy_tables.TV_IMAGENET_POLICY`)
#: in the plan's op names.
_PLAN_NAMES = {
    "AutoContrast": "autocontrast",
    "ShearX": "shear_x",
    "ShearY": "shear_y",
    "TranslateX": "translate_x",
    "TranslateY": "translate_y",
}
_IMAGENET_POLICY = tuple(
    tuple((_PLAN_NAMES.get(name, name.lower()), prob, level) for name, prob, level in pair)
    for pair in TV_IMAGENET_POLICY
)


assert all(name in OP_NAMES for name, _ in _TIMM_OPS.values())
