"""TorchCodec: torchcodec's image decoding and torchvision v2's RandomResizedCrop on tensors, in torch's DataLoader.

TorchCodec (0.16 and later) decodes images to uint8 CHW tensors and is the decoder torchvision now points to; it has
no dataset format, so its "conversion" is the file list ``file_list.txt``. Per image, in ``workers`` DataLoader
workers: ``torchcodec.decoders.decode_image`` of the file's bytes (RGB), torchvision v2's ``RandomResizedCrop(size)``
and ``RandomHorizontalFlip()`` on the tensor; ``default_collate`` stacks the batch in shared memory (uint8 NCHW).

torchcodec 0.17's wheel links the CUDA build of torch (``libc10_cuda.so``, ``libnvrtc.so.13``): beside a CPU-only
torch its image library does not load, and the benchmark reports that in the peer's row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from fastdata.bench.peers.file_list import write_file_list

LIBRARY = "torchcodec"
INSTALL = "pip install torchcodec torchvision (torchcodec 0.17's wheel needs a CUDA build of torch)"
_CUDA_NAMES = ("cuda", "nvrtc", "cudart", "nvjpeg")


def import_library() -> Any:
    """Torchcodec's ``decode_image``, or an ImportError that says why it does not load.

    ``torchcodec.decoders.decode_image``; where the package is there but its image library does not load, an
    ImportError that says why in one line (for torchcodec 0.17 beside a CPU-only torch: the CUDA libraries it
    links).
    """
    try:
        from torchcodec.decoders import decode_image
    except ModuleNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 - any load failure: said in one line, with its root cause
        root: BaseException = exc
        while root.__cause__ is not None:
            root = root.__cause__
        reason = f"{type(root).__name__}: {(str(root).splitlines() or [''])[0]}"
        if any(name in reason.lower() for name in _CUDA_NAMES) and torch.version.cuda is None:
            raise ImportError(
                f"torchcodec is installed but its image library links the CUDA build of torch "
                f"(libc10_cuda.so, libnvrtc.so.13) and this torch is {torch.__version__} "
                f"(CPU only): {reason}"
            ) from exc
        raise ImportError(f"torchcodec is installed but its image library does not load: {reason}") from exc
    return decode_image


def convert(images: Sequence[str], labels: Sequence[int], out_dir: Path) -> dict[str, Any]:
    """Write ``file_list.txt``; TorchCodec reads the original files (their bytes are counted)."""
    return write_file_list(images, labels, out_dir, sep="\t")


class TorchCodecFiles(torch.utils.data.Dataset):
    """``(uint8 CHW tensor, label)``: the file decoded by torchcodec, then torchvision v2's crop and flip."""

    def __init__(self, file_list: Path, size: int) -> None:
        rows = [line.rsplit("\t", 1) for line in Path(file_list).read_text().splitlines() if line]
        self.items = [(path, int(label)) for path, label in rows]
        self.size = size
        self._transform: Callable[[torch.Tensor], torch.Tensor] | None = None  # made in the worker

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self._transform is None:  # made in the worker: torchvision imported where it runs
            from torchvision.transforms import v2

            self._transform = v2.Compose([v2.RandomResizedCrop(self.size), v2.RandomHorizontalFlip()])
        path, label = self.items[index]
        with open(path, "rb") as f:
            image = import_library()(f.read())
        if image.shape[0] == 1:  # grayscale: RGB as PIL's convert("RGB") gives it
            image = image.expand(3, -1, -1)
        elif image.shape[0] == 4:  # alpha dropped
            image = image[:3]
        return self._transform(image), label


def loader(out_dir: Path, batch_size: int, workers: int, size: int = 224) -> torch.utils.data.DataLoader:
    """Torch's DataLoader over :class:`TorchCodecFiles` (shuffled, ``default_collate``)."""
    return torch.utils.data.DataLoader(
        TorchCodecFiles(Path(out_dir) / "file_list.txt", size), batch_size, shuffle=True, num_workers=workers
    )
