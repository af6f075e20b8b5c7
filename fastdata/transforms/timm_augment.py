"""timm's RandAugment on the uint8 crop at decode time: ``TimmRandAugment`` (what ``RandAugment.from_config`` builds).

timm's ``train.py --aa rand-m9-mstd0.5-inc1`` runs ``timm.data.auto_augment.RandAugment`` on PIL images in the
DataLoader workers. This is the same policy on uint8: timm's op set (``inc1``: the ``*Increasing`` variants), its
magnitude noise (``mstd``: normal, or uniform when above 100), its clip (``mmax``, else 10), the per-op probability
(``p``, default 0.5), timm's magnitude-to-argument maps and sign coins, the fill (``img_mean``) and PIL's geometric
conventions; the random interpolation of timm's default (bilinear or bicubic, drawn per geometric op). Ops use PIL's
arithmetic (:mod:`fastdata.transforms.uint8_colour`, flavour ``"pil"``) and, for the bicubic rotate and shear, PIL's
affine bicubic (the C extension ``fastdata.transforms._affine``; without it OpenCV's cubic kernel, a few levels off
at edges: see :mod:`fastdata.transforms.uint8_geometry`). One deliberate difference from timm on Pillow >= 10:
``PosterizeIncreasing`` at magnitude 10 keeps 0 bits (black), which older Pillow gave and newer Pillow refuses with
a ``ValueError``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from fastdata.transforms.augment import check_fill, check_interpolation, check_probability
from fastdata.transforms.compose import ImageAugment
from fastdata.transforms.policy_tables import GEOMETRIC, TIMM_OPS, apply_op, timm_op_names

__all__ = ["TimmRandAugment"]

_RANDOM = ("bilinear", "bicubic")  # timm's _RANDOM_INTERPOLATION


class TimmRandAugment(ImageAugment):
    """timm's ``RandAugment`` (``rand_augment_transform``) on the uint8 crop (see the module docstring).

    Per image: ``num_ops`` op names drawn uniformly with replacement (or, for a weighted set, with timm's weights
    and without replacement); each applied with probability ``prob`` at a magnitude ``magnitude`` (plus normal noise
    of ``magnitude_std``; ``inf``: uniform in ``[0, magnitude]``) clipped to ``[0, magnitude_max or 10]``.

    Args:
        num_ops: ops per image (timm's ``n``).
        magnitude: the magnitude (timm's ``m``, 0..10 unless ``magnitude_max`` says more).
        prob: the probability of applying each chosen op (``p``).
        magnitude_std: the std of the magnitude noise (``mstd``; ``math.inf``: uniform).
        magnitude_max: the magnitude's upper clip (``mmax``; None: 10).
        increasing: use the ops whose strength grows with the magnitude (``inc1``).
        transforms: the op set: None (timm's 15 RandAugment ops), ``"weights"``, ``"3a"``, ``"3aw"`` (``t...``) or a
            list of timm op names (``"Rotate"``, ``"ColorIncreasing"``, ...).
        fill: the fill colour of geometric ops (timm's ``img_mean``; default the ImageNet mean as ``train.py``
            passes it; timm's own default without hparams is ``(128, 128, 128)``).
        interpolation: ``"random"`` (timm's default: bilinear or bicubic per op), ``"bilinear"``, ``"bicubic"`` or
            ``"nearest"``.
        translate_pct: the largest relative translation (``TranslateXRel``), 0.45 as timm.
        translate_const: the largest absolute translation (``TranslateX``) in pixels (``train.py``: 45% of the size).

    Raises:
        ValueError: a bad count, magnitude, probability, op name, fill or interpolation.
    """

    def __init__(
        self,
        num_ops: int = 2,
        magnitude: float = 10,
        *,
        prob: float = 0.5,
        magnitude_std: float = 0.0,
        magnitude_max: float | None = None,
        increasing: bool = False,
        transforms: str | Sequence[str] | None = None,
        fill: Any = (124, 116, 104),
        interpolation: str = "random",
        translate_pct: float = 0.45,
        translate_const: int = 100,
    ) -> None:
        if isinstance(num_ops, bool) or not isinstance(num_ops, int) or num_ops < 0:
            raise ValueError(f"num_ops must be an int >= 0, got {num_ops!r}")
        if not (isinstance(magnitude, (int, float)) and magnitude >= 0):
            raise ValueError(f"magnitude must be a number >= 0, got {magnitude!r}")
        if not (isinstance(magnitude_std, (int, float)) and magnitude_std >= 0):
            raise ValueError(f"magnitude_std must be >= 0 (math.inf: uniform), got {magnitude_std!r}")
        self.num_ops, self.magnitude, self.magnitude_std = num_ops, float(magnitude), float(magnitude_std)
        self.prob = check_probability(prob, "prob")
        self.magnitude_max = None if magnitude_max is None else float(magnitude_max)
        self.increasing = bool(increasing)
        if transforms is None or isinstance(transforms, str):
            self.op_names, self.weights = timm_op_names(self.increasing, transforms)
        else:
            self.op_names, self.weights = tuple(transforms), None
        unknown = [n for n in self.op_names if n not in TIMM_OPS]
        if unknown or not self.op_names:
            raise ValueError(f"unknown timm op names {unknown}; known: {sorted(TIMM_OPS)}")
        if self.weights is not None and num_ops > len(self.op_names):
            raise ValueError(
                f"num_ops={num_ops} is more than the {len(self.op_names)} ops a weighted set draws without replacement"
            )
        self.transforms = transforms
        self.fill = check_fill(fill)
        self.interpolation = check_interpolation(interpolation, ("random", "nearest", "bilinear", "bicubic"))
        self.hparams = {"translate_pct": float(translate_pct), "translate_const": int(translate_const)}

    @classmethod
    def from_config(cls, config: str, **kwargs: Any) -> TimmRandAugment:
        """Build from timm's config string, e.g. ``"rand-m9-mstd0.5-inc1"``.

        Sections (timm's ``rand_augment_transform``): ``m`` magnitude (int, default 10), ``n`` ops (default 2),
        ``p`` probability (0.5), ``mstd`` magnitude std (above 100: uniform), ``mmax`` magnitude clip, ``inc``
        increasing ops (0/1), ``t`` op set (``tweights``, ``t3a``, ``t3aw``). Keyword arguments override them
        (``fill``, ``interpolation``, ``translate_const``, ...).

        Raises:
            ValueError: not a ``rand-`` string, or a section timm does not define.
        """
        return cls(**{**parse_rand_config(config), **kwargs})

    def _magnitude(self, rng: np.random.Generator) -> float:
        magnitude = self.magnitude
        if self.magnitude_std == math.inf:
            magnitude *= rng.random()
        elif self.magnitude_std > 0:
            magnitude += self.magnitude_std * rng.standard_normal()
        return max(0.0, min(magnitude, self.magnitude_max or 10.0))

    def draw(self, rng: np.random.Generator, height: int, width: int) -> list[tuple[str, float, str]]:
        """The ops one image gets: ``(op, argument, interpolation)`` in order (skipped ops left out)."""
        n = len(self.op_names)
        if self.weights is None:
            chosen = [int(rng.random() * n) for _ in range(self.num_ops)]  # uniform, with replacement
        else:
            chosen = rng.choice(n, self.num_ops, replace=False, p=self.weights).tolist()
        plan = []
        for k in chosen:
            if self.prob < 1.0 and rng.random() > self.prob:
                continue
            name = self.op_names[k]
            magnitude = self._magnitude(rng)
            op, level = TIMM_OPS[name]
            arg = 0.0 if level is None else float(level(magnitude, self.hparams, rng.random() > 0.5))
            if name in ("TranslateXRel", "TranslateYRel"):
                arg *= width if name == "TranslateXRel" else height
            elif name == "GaussianBlurRand":
                arg = 0.1 + (2.0 * arg - 0.1) * rng.random()  # random.uniform(0.1, 2 * level)
            interpolation = self.interpolation
            if op in GEOMETRIC and interpolation == "random":
                interpolation = _RANDOM[rng.random() < 0.5]
            plan.append((op, arg, interpolation))
        return plan

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:  # noqa: D102
        for op, arg, interpolation in self.draw(rng, image.shape[0], image.shape[1]):
            image = apply_op(image, op, arg, flavour="pil", interpolation=interpolation, fill=self.fill)
        return image

    def _extra_repr(self) -> str:
        return (
            f"num_ops={self.num_ops}, magnitude={self.magnitude}, prob={self.prob}, "
            f"magnitude_std={self.magnitude_std}, magnitude_max={self.magnitude_max}, "
            f"increasing={self.increasing}, transforms={self.transforms!r}, fill={self.fill}, "
            f"interpolation={self.interpolation!r}"
        )


def parse_rand_config(config: str) -> dict[str, Any]:
    """Timm's RandAugment config string as keyword arguments.

    Timm's RandAugment config string (``"rand-m9-mstd0.5-inc1"``) as keyword arguments: ``magnitude``,
    ``num_ops``, ``prob``, ``magnitude_std``, ``magnitude_max``, ``increasing`` and ``transforms`` (the ``t`` section),
    only those the string sets. Shared by the decode-time and the batched ``TimmRandAugment``.

    Raises:
        ValueError: not a ``rand-`` string, or a section timm does not define.
    """
    if not isinstance(config, str) or config.split("-")[0] != "rand":
        raise ValueError(f"a RandAugment config starts with 'rand', e.g. 'rand-m9-mstd0.5-inc1'; got {config!r}")
    args: dict[str, Any] = {}
    for section in config.split("-")[1:]:
        if section.startswith("t"):  # the op set, as timm reads it
            args["transforms"] = section[1:]
            continue
        match = re.fullmatch(r"([a-z]+)(\d.*)", section)
        key, value = match.groups() if match else (section, "")
        try:
            if key == "m":
                args["magnitude"] = int(value)
            elif key == "n":
                args["num_ops"] = int(value)
            elif key == "p":
                args["prob"] = float(value)
            elif key == "mstd":
                args["magnitude_std"] = math.inf if float(value) > 100 else float(value)
            elif key == "mmax":
                args["magnitude_max"] = int(value)
            elif key == "inc":
                args["increasing"] = bool(int(value))
            else:
                raise ValueError
        except ValueError:
            raise ValueError(
                f"cannot read section {section!r} of {config!r}; timm's sections are m<int>, n<int>, "
                "p<float>, mstd<float>, mmax<int>, inc<0|1>, t<weights|3a|3aw>"
            ) from None
    return args
