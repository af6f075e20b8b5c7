"""SPDL (Meta's scalable and performant data loading): a thread pipeline over the image files themselves.

SPDL has no dataset format, so its "conversion" is the file list ``file_list.txt``. Per image, in
``workers`` threads: ``spdl.io.demux_image`` (header: width and height), torchvision's RandomResizedCrop box,
``spdl.io.decode_packets`` with an FFmpeg filter ``crop,scale (bilinear),[hflip],format=rgb24``; batches are
stacked to uint8 NCHW.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fastdata.bench.peers.file_list import write_file_list

LIBRARY = "spdl.io"
INSTALL = "pip install spdl (and FFmpeg's libraries: apt-get install libavdevice59 libavfilter8)"


def convert(images: Sequence[str], labels: Sequence[int], out_dir: Path) -> dict[str, Any]:
    """Write ``file_list.txt``; SPDL reads the original files (their bytes are counted)."""
    return write_file_list(images, labels, out_dir, sep="\t")


def _decode(item: tuple[str, int], size: int) -> tuple[np.ndarray, int]:
    import spdl.io

    from fastdata.transforms import RandomResizedCrop

    path, label = item
    packets = spdl.io.demux_image(path)
    top, left, height, width = RandomResizedCrop.get_params(packets.height, packets.width, (0.08, 1.0), (3 / 4, 4 / 3))
    flip = ",hflip" if torch.rand(1) < 0.5 else ""
    graph = f"crop={width}:{height}:{left}:{top},scale={size}:{size}:flags=bilinear{flip},format=rgb24"
    frames = spdl.io.decode_packets(packets, filter_desc=graph)
    return spdl.io.to_numpy(spdl.io.convert_frames(frames)), label


def _collate(batch: list[tuple[np.ndarray, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.from_numpy(np.stack([image for image, _ in batch])).permute(0, 3, 1, 2)
    return images, torch.tensor([label for _, label in batch], dtype=torch.int64)


class SpdlFiles:
    """A fresh SPDL pipeline per pass: shuffled file list -> decode (``workers`` threads) -> batches."""

    def __init__(self, file_list: Path, batch_size: int, workers: int, size: int) -> None:
        rows = [line.rsplit("\t", 1) for line in file_list.read_text().splitlines() if line]
        self.items = [(path, int(label)) for path, label in rows]
        self.batch_size, self.workers, self.size = batch_size, max(1, workers), size
        self.epoch = 0

    def __len__(self) -> int:
        return -(-len(self.items) // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        from functools import partial

        from spdl.pipeline import PipelineBuilder

        order = np.random.default_rng(self.epoch).permutation(len(self.items))
        self.epoch += 1
        builder: Any = PipelineBuilder()  # SPDL's stubs type each stage's function as Never -> Never
        pipeline = (
            builder.add_source([self.items[i] for i in order])
            .pipe(partial(_decode, size=self.size), concurrency=self.workers)
            .aggregate(self.batch_size, drop_last=False)
            .pipe(_collate)
            .add_sink(4)
            .build(num_threads=self.workers)
        )
        with pipeline.auto_stop():
            yield from pipeline


def loader(out_dir: Path, batch_size: int, workers: int, size: int = 224) -> SpdlFiles:
    """A :class:`SpdlFiles` over ``out_dir/file_list.txt``."""
    return SpdlFiles(Path(out_dir) / "file_list.txt", batch_size, workers, size)
