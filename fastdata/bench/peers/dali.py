"""NVIDIA DALI, CPU pipeline (``device_id=None``): ``fn.readers.file`` over the image files themselves.

DALI has no dataset format of its own to write (it reads files, TFRecord, RecordIO or tar shards made by other
tools), so its "conversion" is the file list ``file_list.txt`` (path and label per line). Per image:
``fn.decoders.image_random_crop`` (the fused decode of a RandomResizedCrop box), ``fn.resize`` (linear,
antialiased), ``fn.crop_mirror_normalize`` to uint8 CHW with a 50% flip; ``num_threads=workers``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from fastdata.bench.peers.file_list import write_file_list

LIBRARY = "nvidia.dali"
INSTALL = "pip install nvidia-dali-cuda120"
_READER = "Reader"


def convert(images: Sequence[str], labels: Sequence[int], out_dir: Path) -> dict[str, Any]:
    """Write ``file_list.txt``; DALI reads the original files (their bytes are counted)."""
    return write_file_list(images, labels, out_dir, sep=" ")


class DaliFiles:
    """One DALI CPU pipeline; every ``iter()`` is one pass (the last batch may be partial)."""

    def __init__(self, file_list: Path, batch_size: int, workers: int, size: int) -> None:
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.data_node import DataNode
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        # No device_id: None, Pipeline's default, a pipeline that does not use the GPU (every operator on the CPU).
        @pipeline_def(batch_size=batch_size, num_threads=max(1, workers), seed=0)
        def pipe():
            encoded, label = fn.readers.file(file_list=str(file_list), random_shuffle=True, name=_READER)
            decoded = fn.decoders.image_random_crop(
                encoded,
                device="cpu",
                output_type=types.DALIImageType.RGB,
                random_area=[0.08, 1.0],
                random_aspect_ratio=[3 / 4, 4 / 3],
                num_attempts=10,
            )
            resized = fn.resize(
                decoded, size=[size, size], interp_type=types.DALIInterpType.INTERP_LINEAR, antialias=True
            )
            assert isinstance(resized, DataNode)  # one output (no save_attrs); runs once, when the graph is built
            images = fn.crop_mirror_normalize(
                resized,
                dtype=types.DALIDataType.UINT8,
                output_layout="CHW",
                mirror=fn.random.coin_flip(probability=0.5),
            )
            return images, label

        self._iterator = DALIGenericIterator(
            pipe(),
            ["images", "labels"],
            reader_name=_READER,
            last_batch_policy=LastBatchPolicy.PARTIAL,
            auto_reset=True,
        )

    def __len__(self) -> int:
        return len(self._iterator)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for (out,) in self._iterator:
            yield out["images"], out["labels"].reshape(-1).to(torch.int64)


def loader(out_dir: Path, batch_size: int, workers: int, size: int = 224) -> DaliFiles:
    """A :class:`DaliFiles` over ``out_dir/file_list.txt``."""
    return DaliFiles(Path(out_dir) / "file_list.txt", batch_size, workers, size)
