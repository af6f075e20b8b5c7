"""timm's ``create_dataset`` / ``create_loader``, served by a fastdata pack, ``DataLoaderX`` and fastdata's transforms.

timm's ``train.py`` builds its data with ``timm.data.create_dataset`` and ``timm.data.create_loader``. These two
functions take the same arguments and return what ``train.py`` uses, so one added line switches it over::

    from fastdata.integrations.timm import create_dataset, create_loader  # after train.py's ``from timm.data import``

``create_dataset`` opens ``root/<split>`` (a folder packed with ``fastdata pack``); ``create_loader`` returns a
:class:`TimmLoader`: a ``DataLoaderX`` over it (decode-time ``RandomResizedCrop`` for training,
``ResizeCenterCrop`` by ``crop_pct`` for evaluation, ``fast_collate``) behind a :class:`~fastdata.DataPrefetcher`
that flips, colour-jitters, normalizes and random-erases the batch on ``device``, and hands out
``(images, labels)`` on the device in ``img_dtype``, as timm's prefetcher does. An argument fastdata does not
reproduce (aug splits, mixup collate, ...) raises ``ValueError`` naming the ``train.py`` flag to drop, rather than
training with a different recipe than asked. The decode-time resize is PIL's antialiased bilinear by default
(``create_transform``'s ``interpolation="bilinear"``: timm's pictures); ``resample="fast"`` takes fastdata 0.2.0's
cheaper OpenCV resize (:mod:`fastdata.decode.scaling` says what each gives). ``interpolation`` does not change the
crop's resize (``"random"``, as ``train.py`` passes, picks bilinear or bicubic per image in timm; here bilinear).

``auto_augment`` (``--aa``: ``rand-...`` strings, and ``3a``) and with it the whole training recipe run where
``augment_at`` says: ``"decode"`` puts flip, the policy, colour jitter and random erasing in the DataLoader workers
on the uint8 crop (:class:`~fastdata.transforms.DecodeCompose`: timm's RandAugment as
:class:`~fastdata.transforms.TimmRandAugment`, :class:`~fastdata.transforms.RandomErasing` in uint8 units of the
``Normalize`` after it), leaving only normalization to the prefetcher; ``"device"`` runs them batched on ``device``
(``fastdata.gpu_transforms``; ``3a`` is decode-time only); ``"auto"`` (the default) picks ``"device"`` for a CUDA
device and ``"decode"`` otherwise. As in timm, ``--aa`` turns colour jitter off unless it is ``3a``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import torch

from fastdata import gpu_transforms as device_transforms
from fastdata import transforms as decode_transforms
from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.gpu_transforms import ColorJitter, Compose, Normalize, RandomErasing, RandomHorizontalFlip
from fastdata.loader import DataLoaderX, DataPrefetcher, fast_collate
from fastdata.sampler import DistributedSampler, EvalSampler
from fastdata.transforms import DecodeCompose, RandomResizedCrop, ResizeCenterCrop

__all__ = ["TimmLoader", "create_dataset", "create_loader"]

_Pair = tuple[float, float]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_DEFAULT_CROP_PCT = 0.875


def create_dataset(
    name: str,
    root: str | os.PathLike,
    split: str = "validation",
    is_training: bool = False,
    class_map: Any = None,
    input_img_mode: str = "RGB",
    num_samples: int | None = None,
    repeats: int = 0,
    **ignored: Any,
) -> ShardDataset:
    """The fastdata pack at ``root/split`` (or ``root`` itself when it is a pack), as timm's ``create_dataset``.

    ``name`` must be ``""`` or ``"fastdata"``; timm's download/seed/key arguments do not apply to a pack and are
    ignored. The crop transform is set later by :func:`create_loader`, as timm does.

    Raises:
        ValueError: no pack at ``root/split`` or ``root``, or an option a pack does not support.
    """
    if name not in ("", "fastdata"):
        raise ValueError(f"dataset name {name!r} is not a fastdata pack; run train.py with --dataset '' (the default)")
    for flag, value, default in (
        ("--class-map", class_map, ("", None)),
        ("--input-img-mode", input_img_mode, ("RGB", None)),
        ("--train/val-num-samples", num_samples, (None,)),
        ("--epoch-repeats", repeats, (0, 0.0)),
    ):
        if value not in default:
            raise ValueError(f"{flag}={value!r} is not supported with a fastdata pack; leave it at its default")
    for candidate in (Path(root) / split, Path(root)):
        if (candidate / "manifest.json").is_file():
            return ShardDataset(candidate)
    raise ValueError(
        f"no fastdata pack at {Path(root) / split} or {root}; pack the split first: "
        f"fastdata pack IMAGE_FOLDER {Path(root) / split}"
    )


class TimmLoader:
    """What ``train.py`` iterates: ``(images, labels)`` on the device, plus the loader attributes it reads.

    ``len()``, ``dataset``, ``sampler``, ``batch_sampler``, ``state_dict()``/``load_state_dict()`` are the
    ``DataLoaderX``'s (its ``loader`` attribute); ``mixup_enabled`` is there for ``train.py`` and stays False.
    """

    def __init__(self, loader: DataLoaderX, prefetcher: DataPrefetcher) -> None:
        self.loader = loader
        self.prefetcher = prefetcher
        self.mixup_enabled = False

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return iter(self.prefetcher)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("loader", "prefetcher"):
            raise AttributeError(name)
        return getattr(self.loader, name)


def create_loader(  # noqa: D417 (timm's create_loader arguments, with timm's meanings: only ours are documented)
    dataset: ShardDataset,
    input_size: int | Sequence[int],
    batch_size: int,
    is_training: bool = False,
    no_aug: bool = False,
    re_prob: float = 0.0,
    re_mode: str = "const",
    re_count: int = 1,
    scale: Sequence[float] | None = None,
    ratio: Sequence[float] | None = None,
    hflip: float = 0.5,
    color_jitter: float | Sequence[float] | None = 0.4,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
    num_workers: int = 1,
    distributed: bool = False,
    crop_pct: float | None = None,
    collate_fn: Callable | None = None,
    pin_memory: bool = False,
    img_dtype: torch.dtype = torch.float32,
    device: torch.device | str = torch.device("cuda"),  # noqa: B008 (timm's own default; immutable)
    persistent_workers: bool = True,
    seed: int = 42,
    auto_augment: str | None = None,
    interpolation: str = "bilinear",
    augment_at: str = "auto",
    resample: str | None = None,
    **options: Any,
) -> TimmLoader:
    """Timm's ``create_loader`` over a fastdata pack (see the module docstring for what it builds).

    The remaining timm arguments (``use_prefetcher``, ``worker_seeding``, ...) are accepted; those that would change
    the recipe are refused unless left at timm's default (``_UNSUPPORTED`` in this module). ``interpolation`` is that of
    ``auto_augment``'s geometric ops (``"random"``, as ``train.py`` passes: bilinear or bicubic per op).

    Args:
        augment_at: where the training augmentations run: ``"decode"`` (the workers, on uint8), ``"device"``
            (batched on ``device``) or ``"auto"`` (``"device"`` for a CUDA device, else ``"decode"``).
        resample: the decode-time crop's resize (:class:`~fastdata.transforms.RandomResizedCrop`'s, and the
            evaluation ``ResizeCenterCrop``'s): None or ``"antialias"`` (PIL's antialiased bilinear, timm's
            pictures), ``"fast"`` (0.2.0's OpenCV resize, cheaper, sharper than timm's).

    Raises:
        TypeError: ``dataset`` is not a :class:`~fastdata.ShardDataset` (use :func:`create_dataset`).
        ValueError: an augmentation fastdata does not reproduce was asked for, or a bad ``augment_at``.
    """
    if not isinstance(dataset, ShardDataset):
        raise TypeError(
            f"dataset must be a fastdata ShardDataset from fastdata.integrations.timm.create_dataset, "
            f"got {type(dataset).__name__}"
        )
    _refuse(options, collate_fn)
    size = _size(input_size)
    device = torch.device(device)
    augment = is_training and not no_aug
    if augment_at not in ("auto", "decode", "device"):
        raise ValueError(f"augment_at must be 'auto', 'decode' or 'device', got {augment_at!r}")
    at_decode = augment_at == "decode" or (augment_at == "auto" and device.type != "cuda")
    auto_augment = auto_augment or None
    policy = _policy(auto_augment, size, mean, interpolation, at_decode) if augment else None
    if auto_augment and "3a" not in auto_augment:
        color_jitter = None  # timm turns colour jitter off under --aa (but for 3-Augment)
    jitter = None
    if augment and color_jitter:
        jitter = (float(color_jitter),) * 3 if isinstance(color_jitter, (int, float)) else tuple(color_jitter)[:3]
    if augment:
        area, aspect = tuple(scale or (0.08, 1.0)), tuple(ratio or (3.0 / 4.0, 4.0 / 3.0))
        crop = RandomResizedCrop(size, cast(_Pair, area), cast(_Pair, aspect), resample=resample)  # checks the pairs
        dataset.transform = crop
    else:
        if size[0] != size[1]:  # timm keeps the aspect ratio then (ResizeKeepRatio), which is not reproduced here
            raise ValueError(f"evaluation at a non-square input_size {size} is not supported; use a square size")
        dataset.transform = ResizeCenterCrop(
            math.floor(size[0] / (crop_pct or _DEFAULT_CROP_PCT)), size, resample=resample
        )
    steps: list[Any] = []
    if augment and at_decode:  # the recipe in the workers, in timm's order; the device only normalizes
        recipe: list[Any] = [crop]
        if hflip > 0:
            recipe.append(decode_transforms.RandomHorizontalFlip(hflip))
        recipe += [policy] if policy is not None else []
        recipe += [decode_transforms.ColorJitter(*jitter)] if jitter else []
        if re_prob > 0:
            recipe.append(
                decode_transforms.RandomErasing(re_prob, mode=re_mode, max_count=re_count, mean=mean, std=std)
            )
        dataset.transform = DecodeCompose(recipe)
        steps.append(Normalize(mean, std, dtype=img_dtype))
    else:
        if augment and hflip > 0:
            steps.append(RandomHorizontalFlip(hflip))
        if policy is not None:
            steps.append(policy)
        if jitter:
            steps.append(ColorJitter(*jitter))
        steps.append(Normalize(mean, std, dtype=img_dtype))
        if augment and re_prob > 0:
            steps.append(RandomErasing(re_prob, mode=re_mode, max_count=re_count))
    if distributed:
        sampler = DistributedSampler(dataset, seed=seed) if is_training else EvalSampler(dataset)
        shuffle, generator = None, None
    else:
        sampler, shuffle, generator = None, is_training, torch.Generator().manual_seed(seed)
    loader: DataLoaderX[Any] = DataLoaderX(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        sampler=sampler,
        num_workers=num_workers,
        collate_fn=fast_collate,
        pin_memory=pin_memory and device.type == "cuda",
        drop_last=is_training,
        generator=generator,
        persistent_workers=persistent_workers and num_workers > 0,
    )
    return TimmLoader(loader, DataPrefetcher(loader, device=device, transform=Compose(steps), dtype=img_dtype))


# train.py flag -> (create_loader argument, the values that leave the recipe as fastdata builds it)
_UNSUPPORTED = {
    "--resplit": ("re_split", (False,)),
    "--train-crop-mode": ("train_crop_mode", (None, "rrc")),
    "--vflip": ("vflip", (None, 0)),
    "--color-jitter-prob": ("color_jitter_prob", (None,)),
    "--grayscale-prob": ("grayscale_prob", (None, 0)),
    "--gaussian-blur-prob": ("gaussian_blur_prob", (None, 0)),
    "--aug-repeats": ("num_aug_repeats", (0,)),
    "--aug-splits": ("num_aug_splits", (0,)),
    "(crop_mode)": ("crop_mode", (None, "center")),
    "(crop_border_pixels)": ("crop_border_pixels", (None,)),
    "(tf_preprocessing)": ("tf_preprocessing", (False,)),
    "--train-img-sizes": ("input_size_choices", (None,)),
    "--train-batch-sizes": ("batch_size_choices", (None,)),
    "--train-batches-per-epoch": ("num_batches", (None,)),
    "(fp16)": ("fp16", (False,)),
}


def _refuse(options: dict[str, Any], collate_fn: Callable | None) -> None:
    if collate_fn is not None:
        raise ValueError(
            "a collate_fn (timm's FastCollateMixup, from --mixup/--cutmix) is not supported; drop "
            "--mixup/--cutmix, or mix on the device with fastdata.gpu_transforms.MixupCutmix"
        )
    for flag, (name, allowed) in _UNSUPPORTED.items():
        if name in options and options[name] not in allowed:
            raise ValueError(
                f"{name}={options[name]!r} ({flag}) is not reproduced by fastdata's timm loader; "
                "leave it at timm's default"
            )


def _policy(
    auto_augment: str | None, size: tuple[int, int], mean: Sequence[float], interpolation: str, at_decode: bool
) -> Any:
    """Timm's ``--aa`` policy, at decode time or batched for the device.

    Timm's ``--aa`` policy, built as timm's ``transforms_imagenet_train`` builds it (fill = the mean colour,
    translations relative to the size), at decode time or batched for the device; None without one.
    """
    if auto_augment is None:
        return None
    if not isinstance(auto_augment, str) or not (auto_augment.startswith("rand") or auto_augment == "3a"):
        raise ValueError(
            f"auto_augment={auto_augment!r} (--aa) is not reproduced by fastdata's timm loader; it "
            "runs timm's RandAugment ('rand-m9-mstd0.5-inc1', ...) and '3a'"
        )
    if interpolation not in ("random", "bilinear", "bicubic", "nearest"):
        raise ValueError(
            f"interpolation={interpolation!r} (--train-interpolation) is not reproduced with --aa; use "
            "random, bilinear, bicubic or nearest"
        )
    if auto_augment == "3a":
        if not at_decode:
            raise ValueError("auto_augment='3a' (--aa 3a) runs at decode time only; pass augment_at='decode'")
        return decode_transforms.ThreeAugment(color_jitter=0.0)  # timm's 3a: its colour jitter follows it
    if not at_decode:
        return device_transforms.RandAugment.from_config(auto_augment)
    return decode_transforms.RandAugment.from_config(
        auto_augment,
        fill=tuple(min(255, round(255 * x)) for x in mean),
        interpolation=interpolation,
        translate_const=int(min(size) * 0.45),
    )


def _size(input_size: int | Sequence[int]) -> tuple[int, int]:
    """Timm's ``input_size`` (an int, ``(H, W)`` or ``(C, H, W)``) as ``(H, W)``."""
    if isinstance(input_size, int):
        return input_size, input_size
    dims = tuple(int(v) for v in input_size)
    if len(dims) == 3:
        if dims[0] != 3:
            raise ValueError(f"input_size {dims} has {dims[0]} channels; fastdata packs decode 3-channel RGB")
        dims = dims[1:]
    if len(dims) != 2:
        raise ValueError(f"input_size must be an int, (H, W) or (C, H, W), got {input_size!r}")
    return dims
