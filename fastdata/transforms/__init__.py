"""Decode-time sample transforms: encoded bytes in, RGB ``uint8`` ``(H, W, 3)`` out, in the workers.

The interface (:mod:`.base`: :class:`DecodeTransform`, :class:`Decode`), the crops (:mod:`.crop`:
:class:`RandomResizedCrop`, :class:`ResizeCenterCrop`, sampled by :mod:`.crop_params`), k crops of one
decode (:mod:`.multicrop`: :class:`MultiCrop`) and the progressive-resolution schedule
(:mod:`.resolution`: :func:`ramp`). Each chooses its crop(s) and DCT scale and calls the decode kernel.

After the crop, augmentations of the uint8 crop run in the same worker (:mod:`.compose`: :class:`DecodeCompose`,
:class:`ImageAugment`): the policies (:mod:`.policies`: :class:`RandAugment`, :class:`TrivialAugmentWide`,
:class:`AutoAugment`, :class:`ThreeAugment`; :mod:`.timm_augment`: timm's RandAugment), :class:`RandomErasing`
(:mod:`.erasing`), :class:`ColorJitter` and :class:`RandomHorizontalFlip` (:mod:`.augment`), built from the uint8
ops of :mod:`.uint8_colour` and :mod:`.uint8_geometry` (tables in :mod:`.policy_tables`).
"""

from fastdata.transforms.augment import ColorJitter, RandomHorizontalFlip
from fastdata.transforms.base import Decode, DecodeTransform
from fastdata.transforms.compose import DecodeCompose, ImageAugment
from fastdata.transforms.crop import RandomResizedCrop, ResizeCenterCrop
from fastdata.transforms.erasing import RandomErasing
from fastdata.transforms.multicrop import MultiCrop
from fastdata.transforms.policies import AutoAugment, RandAugment, ThreeAugment, TrivialAugmentWide
from fastdata.transforms.resolution import ramp
from fastdata.transforms.timm_augment import TimmRandAugment

__all__ = [
    "AutoAugment",
    "ColorJitter",
    "Decode",
    "DecodeCompose",
    "DecodeTransform",
    "ImageAugment",
    "MultiCrop",
    "RandAugment",
    "RandomErasing",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "ResizeCenterCrop",
    "ThreeAugment",
    "TimmRandAugment",
    "TrivialAugmentWide",
    "ramp",
]
