"""FFCV: one ``.beton`` file written by ``ffcv.writer.DatasetWriter``, read by ``ffcv.loader.Loader``.

FFCV's writer takes decoded images and stores them re-encoded as JPEG (``RGBImageField(write_mode="jpg")``,
quality 90, full resolution). Per image, in ``workers`` threads (numba-compiled): ``RandomResizedCropRGBImageDecoder``
(decode + RandomResizedCrop), ``RandomHorizontalFlip``; batches are uint8 NCHW views of NHWC memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

LIBRARY = "ffcv"
INSTALL = (
    "apt-get install libopencv-dev libturbojpeg0-dev pkg-config; pip install ffcv numba terminaltables fastprogress"
)
_FILE = "data.beton"


def import_library() -> Any:
    """``ffcv`` with the modules the writer and the loader need."""
    import ffcv.loader  # noqa: F401
    import ffcv.writer  # noqa: F401

    return ffcv


class _Images:
    """``(RGB uint8 HWC array, label)`` per index, what FFCV's writer takes."""

    def __init__(self, images: Sequence[str], labels: Sequence[int]) -> None:
        self.images, self.labels = list(images), [int(x) for x in labels]

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        from fastdata.bench.baselines import cv2_loader

        return cv2_loader(self.images[index]), self.labels[index]


def convert(images: Sequence[str], labels: Sequence[int], out_dir: Path) -> dict[str, Any]:
    """``DatasetWriter(out_dir/data.beton, {image: RGBImageField(jpg), label: IntField})`` over the images."""
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter

    from fastdata.bench.measure import usable_cores

    writer = DatasetWriter(
        str(out_dir / _FILE),
        {"image": RGBImageField(write_mode="jpg", jpeg_quality=90), "label": IntField()},
        num_workers=usable_cores(),
    )
    writer.from_indexed_dataset(_Images(images, labels))
    return {"note": "one .beton, images re-encoded as JPEG (quality 90) by FFCV's writer"}


class FfcvLoader:
    """``ffcv.loader.Loader`` (random order, last batch kept) yielding ``(uint8 NCHW, int64 labels)``."""

    def __init__(self, path: Path, batch_size: int, workers: int, size: int) -> None:
        from ffcv.fields.basics import IntDecoder
        from ffcv.fields.rgb_image import RandomResizedCropRGBImageDecoder
        from ffcv.loader import Loader, OrderOption
        from ffcv.transforms import RandomHorizontalFlip, Squeeze, ToTensor, ToTorchImage

        self.loader = Loader(
            str(path),
            batch_size=batch_size,
            num_workers=max(1, workers),
            order=OrderOption.RANDOM,
            drop_last=False,
            os_cache=True,
            seed=0,
            pipelines={
                "image": [
                    RandomResizedCropRGBImageDecoder((size, size)),
                    RandomHorizontalFlip(),
                    ToTensor(),
                    ToTorchImage(channels_last=True),
                ],
                "label": [IntDecoder(), ToTensor(), Squeeze()],
            },
        )

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for images, labels in self.loader:
            yield images, labels.reshape(-1).to(torch.int64)

    def close(self) -> None:
        """Stop the loader's threads."""
        close = getattr(self.loader, "close", None)
        if close is not None:
            close()


def loader(out_dir: Path, batch_size: int, workers: int, size: int = 224) -> FfcvLoader:
    """A :class:`FfcvLoader` over ``out_dir/data.beton``."""
    return FfcvLoader(Path(out_dir) / _FILE, batch_size, workers, size)
