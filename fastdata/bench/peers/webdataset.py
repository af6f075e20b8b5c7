"""WebDataset: tar shards written by ``webdataset.ShardWriter``, read by ``WebDataset`` + ``WebLoader``.

Per sample the workers do what ``torch-cv2`` does: ``cv2.imdecode``, torchvision's RandomResizedCrop box,
``cv2.resize`` (linear), a 50% flip; batches of uint8 are made in the workers (``.batched``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

LIBRARY = "webdataset"
INSTALL = "pip install webdataset"
_SHARD_BYTES = 64 << 20


def convert(images: Sequence[str], labels: Sequence[int], out_dir: Path) -> dict[str, Any]:
    """Write ``(image bytes, label)`` samples into ``out_dir/shard-NNNNNN.tar`` (64 MiB each)."""
    import webdataset as wds

    with wds.ShardWriter(str(out_dir / "shard-%06d.tar"), maxsize=_SHARD_BYTES, verbose=0) as sink:
        for i, (path, label) in enumerate(zip(images, labels, strict=False)):
            ext = "png" if path.lower().endswith(".png") else "jpg"
            sink.write({"__key__": f"{i:08d}", ext: Path(path).read_bytes(), "cls": int(label)})
    return {"note": "tar shards of the original bytes"}


class _Decode:
    def __init__(self, size: int) -> None:
        from fastdata.bench.baselines import CV2RandomResizedCropFlip

        self.crop = CV2RandomResizedCropFlip(size)

    def __call__(self, sample: dict[str, Any]) -> tuple[Any, int]:
        from fastdata.bench.baselines import cv2_decode_bgr

        data = sample.get("jpg", sample.get("png"))
        if data is None:
            raise KeyError(f"sample {sample.get('__key__')!r} has neither a jpg nor a png")
        return self.crop(cv2_decode_bgr(data)), int(sample["cls"])


def loader(out_dir: Path, batch_size: int, workers: int, size: int = 224) -> Any:
    """``WebLoader`` over the shards: shard shuffle, a 1000-sample shuffle buffer, uint8 batches."""
    import webdataset as wds

    from fastdata.bench.baselines import cv2_worker_init, uint8_collate

    urls = sorted(str(p) for p in Path(out_dir).glob("shard-*.tar"))
    dataset = (
        wds.WebDataset(urls, shardshuffle=len(urls), empty_check=False)
        .shuffle(1000)
        .map(_Decode(size))
        .batched(batch_size, collation_fn=uint8_collate, partial=True)
    )
    return wds.WebLoader(dataset, batch_size=None, num_workers=workers, worker_init_fn=cv2_worker_init)
