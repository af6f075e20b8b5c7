"""Batched tensor augmentations that run on the GPU (inside ``DataPrefetcher``) or on the CPU.

Split by kind: :mod:`.colour` (ToFloat, Normalize, ColorJitter), :mod:`.geometry`
(RandomHorizontalFlip, RandomResizedCrop), :mod:`.mixup` (sample mixing: Mixup, CutMix, timm's MixupCutmix; ``MixUp``
is an alias of ``Mixup``, torchvision v2's spelling), on the interface in :mod:`.base`;
per-image augmentation policies in :mod:`.policies` (TrivialAugmentWide, AutoAugment, ThreeAugment) and
the ``rand_augment`` module (RandAugment as torchvision's, TimmRandAugment as timm's; their op tables and magnitudes in
:mod:`.policy_tables`),
built from the batched per-image ops of :mod:`.ops` run by :mod:`.plan`; timm's RandomErasing
(:mod:`.erasing`).

Every transform takes and returns ``(images, labels)``: ``images`` is a ``[N, C, H, W]`` tensor on
any device, ``labels`` an int64 ``[N]`` tensor, soft targets ``[N, K]`` or ``None``. The same code
runs on CPU and CUDA tensors.

Value ranges follow torchvision: uint8 images hold 0..255, float images are assumed to hold [0, 1].
``ToFloat`` and ``RandomResizedCrop`` turn uint8 into float in [0, 1]; ``RandomHorizontalFlip``,
``ColorJitter``, ``Mixup`` and ``CutMix`` keep the dtype (uint8 results are rounded);
``Normalize`` turns either into normalized float, folding the /255 into one fused op for uint8.

Randomness: per-sample parameters are drawn on the CPU from ``generator`` (a CPU
``torch.Generator``; ``None`` uses torch's default CPU RNG) and moved to the images' device with
``non_blocking=True``, so CPU and CUDA runs with the same seed use identical parameters and no
transform reads a device tensor back to the host.
"""

from fastdata.gpu_transforms.base import BatchTransform, Compose
from fastdata.gpu_transforms.colour import IMAGENET_MEAN, IMAGENET_STD, ColorJitter, Normalize, ToFloat
from fastdata.gpu_transforms.erasing import RandomErasing
from fastdata.gpu_transforms.geometry import RandomHorizontalFlip, RandomResizedCrop
from fastdata.gpu_transforms.mixup import CutMix, MixUp, Mixup, MixupCutmix
from fastdata.gpu_transforms.policies import (
    AutoAugment,
    RandAugment,
    ThreeAugment,
    TimmRandAugment,
    TrivialAugmentWide,
    rand_augment,
)

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "BatchTransform",
    "CutMix",
    "ColorJitter",
    "Compose",
    "MixUp",
    "Mixup",
    "Normalize",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "ToFloat",
    "AutoAugment",
    "MixupCutmix",
    "RandAugment",
    "RandomErasing",
    "ThreeAugment",
    "TimmRandAugment",
    "TrivialAugmentWide",
    "rand_augment",
]
