"""Decode-time sample transforms: encoded bytes in, RGB ``uint8`` ``(H, W, 3)`` out, in the workers.

The interface (:mod:`.base`: :class:`DecodeTransform`, :class:`Decode`), the crops (:mod:`.crop`:
:class:`RandomResizedCrop`, :class:`ResizeCenterCrop`, sampled by :mod:`.crop_params`), k crops of one
decode (:mod:`.multicrop`: :class:`MultiCrop`) and the progressive-resolution schedule
(:mod:`.resolution`: :func:`ramp`). Each chooses its crop(s) and DCT scale and calls the decode kernel.
"""

from fastdata.transforms.base import Decode, DecodeTransform
from fastdata.transforms.crop import RandomResizedCrop, ResizeCenterCrop
from fastdata.transforms.multicrop import MultiCrop
from fastdata.transforms.resolution import ramp

__all__ = ["Decode", "DecodeTransform", "MultiCrop", "RandomResizedCrop", "ResizeCenterCrop", "ramp"]
