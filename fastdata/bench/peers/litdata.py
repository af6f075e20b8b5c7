"""litdata: chunks written by ``litdata.optimize``, read by ``StreamingDataset`` + ``StreamingDataLoader``.

Per sample the workers do what ``torch-cv2`` does (``cv2.imdecode``, RandomResizedCrop box, ``cv2.resize``, 50%
flip, as the dataset's ``transform``), collated to uint8 batches.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

LIBRARY = "litdata"
INSTALL = "pip install litdata"


def _sample(item: tuple[str, int]) -> dict[str, Any]:
    path, label = item
    return {"image": Path(path).read_bytes(), "label": int(label)}


def convert(images: Sequence[str], labels: Sequence[int], out_dir: Path) -> dict[str, Any]:
    """``litdata.optimize`` the ``(original bytes, label)`` samples into 64 MB chunks, input order kept."""
    import litdata

    from fastdata.bench.measure import usable_cores

    method = multiprocessing.get_start_method()
    try:
        litdata.optimize(
            fn=_sample,
            inputs=list(zip(images, [int(x) for x in labels], strict=False)),
            output_dir=str(out_dir),
            chunk_bytes="64MB",
            num_workers=min(2, usable_cores()),
            mode="overwrite",
            verbose=False,
            keep_data_ordered=True,
        )
    finally:  # optimize() sets the whole process's start method to spawn (force=True): every later DataLoader
        multiprocessing.set_start_method(method, force=True)  # would spawn its workers; put the caller's back
    return {"note": "litdata chunks of the original bytes"}


class _Transform:
    def __init__(self, size: int) -> None:
        from fastdata.bench.baselines import CV2RandomResizedCropFlip

        self.crop = CV2RandomResizedCropFlip(size)

    def __call__(self, sample: dict[str, Any]) -> tuple[Any, int]:
        from fastdata.bench.baselines import cv2_decode_bgr

        return self.crop(cv2_decode_bgr(sample["image"])), int(sample["label"])


def loader(out_dir: Path, batch_size: int, workers: int, size: int = 224) -> Any:
    """``StreamingDataLoader(StreamingDataset(out_dir, shuffle=True, transform=...))`` with uint8 batches."""
    import litdata

    from fastdata.bench.baselines import cv2_worker_init, uint8_collate

    dataset = litdata.StreamingDataset(str(out_dir), shuffle=True, transform=_Transform(size))
    return litdata.StreamingDataLoader(
        dataset, batch_size=batch_size, num_workers=workers, collate_fn=uint8_collate, worker_init_fn=cv2_worker_init
    )
