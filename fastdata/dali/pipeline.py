"""The DALI pipeline over packed TFRecord shards: read with the ``.idx`` files, decode, crop, flip, normalize.

``nvidia.dali`` is imported only inside :func:`build_pipeline`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from fastdata._util.optional import import_dali
from fastdata.gpu_transforms.colour import IMAGENET_MEAN, IMAGENET_STD

__all__ = [
    "DEFAULT_INITIAL_FILL",
    "EVAL_CROP_FRACTION",
    "READER_NAME",
    "PipelineOptions",
    "build_pipeline",
    "default_resize_size",
    "shard_bounds",
]

logger = logging.getLogger(__name__)

READER_NAME = "Reader"
DEFAULT_INITIAL_FILL = 4096
"""Reader shuffle buffer, in samples (~110 KB each for ImageNet JPEGs: ~450 MB of host memory)."""
RANDOM_AREA = (0.08, 1.0)
RANDOM_ASPECT_RATIO = (3 / 4, 4 / 3)
EVAL_CROP_FRACTION = 0.875
# nvJPEG scratch preallocation for ImageNet-sized images (the values of NVIDIA's ResNet-50 examples),
# so the mixed decoder does not reallocate during the first epoch.
_DEVICE_MEMORY_PADDING = 211_025_920
_HOST_MEMORY_PADDING = 140_544_512


@dataclass(frozen=True)
class PipelineOptions:
    """What a pipeline does to each sample (everything but batching and sharding).

    Attributes:
        size: output height and width in pixels.
        train: RandomResizedCrop + flip if True; resize shorter side + center crop if False.
        shuffle: shuffle the reader's samples through a buffer of ``initial_fill``.
        mean: per-channel mean in 0..1 units (scaled to 0..255 for DALI).
        std: per-channel standard deviation in 0..1 units.
        half: output float16 instead of float32.
        channels_last: output HWC per sample (an NCHW ``channels_last`` tensor in torch).
        resize_size: eval only: the shorter side before the center crop (default ``size / 0.875``).
        initial_fill: reader shuffle buffer in samples.

    Example:
        The pipeline is not built by the documentation build, which has neither NVIDIA DALI nor a CUDA device.

        >>> options = PipelineOptions(size=160, train=False, half=True)
        >>> pipe = build_pipeline(paths, index_paths, options, batch_size=64, num_threads=4,  # doctest: +SKIP
        ...                       device_id=0, seed=0)
    """

    size: int = 224
    train: bool = True
    shuffle: bool = True
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    half: bool = False
    channels_last: bool = False
    resize_size: int | None = None
    initial_fill: int = DEFAULT_INITIAL_FILL


def shard_bounds(num_samples: int, shard_id: int, num_shards: int) -> tuple[int, int]:
    """The ``[begin, end)`` sample range DALI's readers give to ``shard_id`` of ``num_shards``."""
    return num_samples * shard_id // num_shards, num_samples * (shard_id + 1) // num_shards


def build_pipeline(
    paths: Sequence[str],
    index_paths: Sequence[str],
    options: PipelineOptions,
    *,
    batch_size: int,
    num_threads: int,
    device_id: int | None,
    seed: int,
    shard_id: int = 0,
    num_shards: int = 1,
) -> Any:
    """Define (not build) a DALI pipeline over TFRecord shards with fastdata's features.

    Args:
        paths: TFRecord shard files, read in this order.
        index_paths: the DALI ``"offset size"`` index file of each shard.
        options: sample processing (:class:`PipelineOptions`).
        batch_size: samples per batch.
        num_threads: DALI CPU worker threads.
        device_id: CUDA device to decode on (``"mixed"``), or None for a CPU-only pipeline.
        seed: pipeline seed (reader shuffle, crops, flips).
        shard_id: which of ``num_shards`` contiguous sample ranges to read (it sticks to it).
        num_shards: number of ranges the samples are split into.

    Returns:
        An ``nvidia.dali.Pipeline`` with outputs ``(images, labels)``; its reader is named
        ``READER_NAME`` and pads its last batch by repeating the last sample.

    Raises:
        ImportError: DALI is not installed (the message says how to install it).
    """
    dali = import_dali()
    pipe = dali.Pipeline(batch_size=batch_size, num_threads=num_threads, device_id=device_id, seed=seed)
    with pipe:
        encoded, labels = _read(paths, index_paths, options, shard_id, num_shards)
        decoder_device = "cpu" if device_id is None else "mixed"
        if options.train:
            images, mirror = _train_images(encoded, options, decoder_device), dali.fn.random.coin_flip(probability=0.5)
        else:
            images, mirror = _eval_images(encoded, options, decoder_device), 0
        images = _normalize(images, options, mirror)
        pipe.set_outputs(images, labels if device_id is None else labels.gpu())
    return pipe


def _read(
    paths: Sequence[str], index_paths: Sequence[str], options: PipelineOptions, shard_id: int, num_shards: int
) -> tuple[Any, Any]:
    from nvidia.dali import fn, tfrecord

    # With features=, the reader returns its outputs by feature name (DALI's stub says DataNode or a sequence of them)
    inputs = cast(
        "dict[str, Any]",
        fn.readers.tfrecord(
            path=list(paths),
            index_path=list(index_paths),
            features={
                "image/encoded": tfrecord.FixedLenFeature([], tfrecord.string, ""),
                "image/class/label": tfrecord.FixedLenFeature([1], tfrecord.int64, -1),
            },
            random_shuffle=options.shuffle,
            initial_fill=options.initial_fill,
            shard_id=shard_id,
            num_shards=num_shards,
            stick_to_shard=True,
            pad_last_batch=True,
            name=READER_NAME,
        ),
    )
    return inputs["image/encoded"], inputs["image/class/label"]


def _decoder_kwargs(device: str) -> dict[str, Any]:
    from nvidia.dali import types

    kwargs: dict[str, Any] = {"device": device, "output_type": types.DALIImageType.RGB}
    if device == "mixed":
        kwargs.update(device_memory_padding=_DEVICE_MEMORY_PADDING, host_memory_padding=_HOST_MEMORY_PADDING)
    return kwargs


def _train_images(encoded: Any, options: PipelineOptions, device: str) -> Any:
    """Decode a random crop (torchvision's RandomResizedCrop parameters) and resize it to ``size``."""
    from nvidia.dali import fn, types

    images = fn.decoders.image_random_crop(
        encoded,
        random_area=list(RANDOM_AREA),
        random_aspect_ratio=list(RANDOM_ASPECT_RATIO),
        num_attempts=100,
        **_decoder_kwargs(device),
    )
    return fn.resize(
        images, size=[options.size, options.size], interp_type=types.DALIInterpType.INTERP_LINEAR, antialias=True
    )


def _eval_images(encoded: Any, options: PipelineOptions, device: str) -> Any:
    """Decode the whole image and resize its shorter side to ``resize_size`` (the crop comes later)."""
    from nvidia.dali import fn, types

    images = fn.decoders.image(encoded, **_decoder_kwargs(device))
    resize_size = options.resize_size or default_resize_size(options.size)
    return fn.resize(images, resize_shorter=resize_size, interp_type=types.DALIInterpType.INTERP_LINEAR, antialias=True)


def _normalize(images: Any, options: PipelineOptions, mirror: Any) -> Any:
    """Center-crop to ``size`` (a no-op after the train resize), flip, normalize, lay out."""
    from nvidia.dali import fn, types

    return fn.crop_mirror_normalize(
        images,
        dtype=types.DALIDataType.FLOAT16 if options.half else types.DALIDataType.FLOAT,
        output_layout="HWC" if options.channels_last else "CHW",
        crop=(options.size, options.size),
        out_of_bounds_policy="pad",
        mean=[255.0 * m for m in options.mean],
        std=[255.0 * s for s in options.std],
        mirror=mirror,
    )


def default_resize_size(size: int) -> int:
    """The eval resize of ``size`` (256 for 224): ``size / 0.875``, rounded."""
    return int(round(size / EVAL_CROP_FRACTION))
