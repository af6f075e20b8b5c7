"""The reference pipelines users write without fastdata, for the benchmark to compare against.

torchvision has no CPU build on every platform, so its behaviour is written out here with PIL,
OpenCV and torch, step by step the way torchvision does it:

* ``torch-pil``: ``ImageFolder`` + ``RandomResizedCrop(224)`` + ``RandomHorizontalFlip()`` +
  ``ToTensor()`` + ``Normalize(mean, std)`` in the workers, the default collate.
* ``torch-cv2``: the same folder dataset written as a careful user writes it: ``cv2.imdecode`` (BGR, as OpenCV
  decodes), crop, ``cv2.resize`` (``INTER_LINEAR``), then BGR → RGB of the 224x224 result only, ``cv2.flip``, one
  OpenCV thread per worker and a uint8 collate that stacks the batch once, straight into shared memory
  (channels_last, like fastdata's batches).

The crop parameters come from torchvision's ``get_params`` algorithm with torch's RNG (shared with
:class:`fastdata.transforms.RandomResizedCrop`, which implements the same algorithm).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from fastdata.gpu_transforms import IMAGENET_MEAN, IMAGENET_STD  # re-exported: the one definition
from fastdata.packing.scan import scan_image_folder
from fastdata.transforms import RandomResizedCrop as _DecodeRandomResizedCrop

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "CV2RandomResizedCropFlip",
    "FolderDataset",
    "PILRandomResizedCrop",
    "PILRandomHorizontalFlip",
    "PILToNormalizedTensor",
    "cv2_bgr_loader",
    "cv2_decode_bgr",
    "cv2_loader",
    "cv2_worker_init",
    "pil_loader",
    "pil_train_transform",
    "uint8_collate",
]

_SCALE = (0.08, 1.0)
_RATIO = (3.0 / 4.0, 4.0 / 3.0)


def pil_loader(path: str) -> Any:
    """Torchvision's ``default_loader``: ``PIL.Image.open(path).convert("RGB")``."""
    from PIL import Image

    with open(path, "rb") as f:
        img = Image.open(f)
        return img.convert("RGB")


def cv2_decode_bgr(data: bytes | np.ndarray, name: str = "the image") -> np.ndarray:
    """``cv2.imdecode`` of encoded bytes: BGR uint8 HWC.

    As OpenCV decodes (:class:`CV2RandomResizedCropFlip` turns
    its crop into RGB).
    """
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ValueError(f"OpenCV cannot decode {name}; remove the file or convert it to JPEG/PNG")
    return bgr


def cv2_bgr_loader(path: str) -> np.ndarray:
    """The file decoded by ``cv2.imdecode``: BGR, the torch-cv2 pipeline's loader."""
    return cv2_decode_bgr(np.fromfile(path, dtype=np.uint8), repr(path))


def cv2_loader(path: str) -> np.ndarray:
    """``cv2.imdecode`` of the file's bytes, the whole image converted BGR → RGB (for writers that store RGB)."""
    return cv2.cvtColor(cv2_bgr_loader(path), cv2.COLOR_BGR2RGB)


class FolderDataset(Dataset):
    """``torchvision.datasets.ImageFolder``: ``(transform(loader(path)), label)`` per sample.

    Paths live in one numpy byte-string array (no Python list for copy-on-read growth to touch).

    Args:
        root: folder with one subfolder per class.
        transform: applied to the loaded image.
        loader: path → image (default :func:`pil_loader`).

    Example::

        ds = FolderDataset("train", transform=pil_train_transform(224))
        image, label = ds[0]   # float [3, 224, 224], int
    """

    def __init__(
        self, root: str | os.PathLike, transform: Callable | None = None, loader: Callable[[str], Any] = pil_loader
    ) -> None:
        scan = scan_image_folder(root)
        self.root = Path(root)
        self.classes = scan.classes
        self.transform = transform
        self.loader = loader
        self._paths = np.array([str(self.root / p) for p in scan.paths]).astype(np.bytes_)
        self.targets = np.asarray(scan.labels, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._paths)

    def path(self, index: int) -> str:
        """The absolute path of sample ``index``."""
        return self._paths[index].decode()

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image = self.loader(self.path(index))
        if self.transform is not None:
            image = self.transform(image)
        return image, int(self.targets[index])


def _crop_params(height: int, width: int) -> tuple[int, int, int, int]:
    """Torchvision's ``RandomResizedCrop.get_params`` (the same algorithm, torch's RNG)."""
    return _DecodeRandomResizedCrop.get_params(height, width, _SCALE, _RATIO)


class PILRandomResizedCrop:
    """torchvision's ``RandomResizedCrop(size)`` on a PIL image: ``img.crop(box).resize(size, BILINEAR)``."""

    def __init__(self, size: int) -> None:
        self.size = int(size)

    def __call__(self, img: Any) -> Any:
        """The PIL image cropped to a random torchvision-style box and resized to ``size`` (bilinear)."""
        from PIL import Image

        top, left, height, width = _crop_params(img.height, img.width)
        box = (left, top, left + width, top + height)
        return img.crop(box).resize((self.size, self.size), Image.Resampling.BILINEAR)


class PILRandomHorizontalFlip:
    """torchvision's ``RandomHorizontalFlip(p)`` on a PIL image (``torch.rand(1) < p``)."""

    def __init__(self, p: float = 0.5) -> None:
        self.p = float(p)

    def __call__(self, img: Any) -> Any:
        """The PIL image mirrored left-right with probability ``p``."""
        from PIL import Image

        if torch.rand(1) < self.p:
            return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return img


class PILToNormalizedTensor:
    """torchvision's ``ToTensor()`` then ``Normalize(mean, std)``: float32 CHW, normalized."""

    def __init__(self, mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD) -> None:
        self.mean = torch.tensor(mean, dtype=torch.float32).view(-1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(-1, 1, 1)

    def __call__(self, img: Any) -> torch.Tensor:
        """The PIL image as a float CHW tensor in 0..1, normalized by ``mean`` and ``std``."""
        array = np.array(img, np.uint8, copy=True)
        tensor = torch.from_numpy(array).view(img.size[1], img.size[0], len(img.getbands()))
        tensor = tensor.permute((2, 0, 1)).contiguous().to(dtype=torch.float32).div(255)
        return tensor.sub(self.mean).div(self.std)


class _ComposePIL:
    def __init__(self, steps: Sequence[Callable[[Any], Any]]) -> None:
        self.steps = list(steps)

    def __call__(self, img: Any) -> Any:
        for step in self.steps:
            img = step(img)
        return img


def pil_train_transform(size: int = 224) -> Callable[[Any], torch.Tensor]:
    """``Compose([RandomResizedCrop(size), RandomHorizontalFlip(), ToTensor(), Normalize(...)])``."""
    return _ComposePIL([PILRandomResizedCrop(size), PILRandomHorizontalFlip(), PILToNormalizedTensor()])


class CV2RandomResizedCropFlip:
    """torch-cv2's per-image work: RandomResizedCrop, resize, BGR to RGB and a flip with OpenCV.

    RandomResizedCrop (torchvision's parameters) of a BGR image, ``cv2.resize(INTER_LINEAR)``, BGR → RGB of the
    resized crop only (the careful order: the colour conversion touches 224x224 pixels, not the whole image) and a
    50 % ``cv2.flip`` (contiguous, as OpenCV's docs do it). Returns RGB uint8 HWC.
    """

    def __init__(self, size: int) -> None:
        self.size = int(size)

    def __call__(self, bgr: np.ndarray) -> np.ndarray:
        """A BGR image cropped to a random box, resized, converted to RGB and flipped half the time (uint8 HWC)."""
        top, left, height, width = _crop_params(bgr.shape[0], bgr.shape[1])
        crop = bgr[top : top + height, left : left + width]
        out = cv2.cvtColor(cv2.resize(crop, (self.size, self.size), interpolation=cv2.INTER_LINEAR), cv2.COLOR_BGR2RGB)
        if torch.rand(1) < 0.5:
            out = cv2.flip(out, 1)  # a contiguous copy: a numpy view's negative stride would slow the collate's copy
        return out


def uint8_collate(batch: Sequence[tuple[np.ndarray, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The careful uint8 collate of the torch-cv2 pipeline.

    The careful collate: the HWC uint8 images stacked once, inside a DataLoader worker straight into shared
    memory (as ``default_collate`` allocates), seen as NCHW (channels_last in memory); int64 labels.
    """
    first = batch[0][0]
    shape = (len(batch), *first.shape)
    if get_worker_info() is not None:  # the batch goes to the main process through shared memory: put it there now
        storage = torch.UntypedStorage._new_shared(int(np.prod(shape)))
        images = torch.empty(0, dtype=torch.uint8).set_(storage).view(shape)
    else:
        images = torch.empty(shape, dtype=torch.uint8)
    np.stack([image for image, _ in batch], out=images.numpy())
    labels = torch.tensor([label for _, label in batch], dtype=torch.int64)
    return images.permute(0, 3, 1, 2), labels


def cv2_worker_init(worker_id: int) -> None:
    """The speed tip: one OpenCV thread per DataLoader worker (the workers are the parallelism)."""
    cv2.setNumThreads(1)
