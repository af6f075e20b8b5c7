"""``DataPrefetcher``: overlap the host-to-device copy and GPU augmentation with the training step.

While the training loop works on batch ``i``, batch ``i + 1`` is copied to the device on a side
CUDA stream (``non_blocking`` from pinned memory) and transformed there. Before a batch is handed
out the current stream waits for the side stream and every tensor handed out is
``record_stream``-ed on the current stream, so the caching allocator never reuses its memory
early. Without CUDA the same code runs on the CPU, without streams, with the same results.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from fastdata.gpu_transforms import ToFloat

__all__ = ["DataPrefetcher"]

logger = logging.getLogger(__name__)

Batch = tuple[torch.Tensor, Any]


class DataPrefetcher:
    """Prefetch batches of a loader onto a device, with a GPU batch transform on a side stream.

    Args:
        loader: An iterable of ``(images, labels)`` batches, e.g. a :class:`~fastdata.DataLoaderX`
            with ``collate_fn=fast_collate`` (uint8 ``[N, C, H, W]`` images, int64 labels). ``images``
            may be a list of batches (multi-crop): each is copied and transformed, and handed out as a list.
        device: Target device; ``None`` means ``"cuda"`` when available, else ``"cpu"``.
        transform: A batch transform called as ``images, labels = transform(images, labels)`` on
            the device (see :mod:`fastdata.gpu_transforms`). ``None`` converts uint8 to ``dtype``
            in [0, 1] (``ToFloat``).
        channels_last: Hand images out in ``torch.channels_last`` memory format.
        dtype: Floating dtype of the images handed out. Integer images left by ``transform`` are
            scaled to [0, 1] like ``ToFloat``.

    Raises:
        TypeError: ``dtype`` is not a floating dtype or ``transform`` is not callable.
        ValueError: ``device`` is a CUDA device but CUDA is not available.

    Example::

        >>> prefetcher = DataPrefetcher(loader, transform=Normalize(IMAGENET_MEAN, IMAGENET_STD))
        >>> for images, labels in prefetcher:  # one pass; iterate again for the next epoch
        ...     loss = criterion(model(images), labels)
        >>> images, labels = prefetcher.next()  # apex style: (None, None) once the pass is over
    """

    def __init__(
        self,
        loader: Iterable[Any],
        device: str | torch.device | None = None,
        transform: Callable[..., tuple[torch.Tensor, Any]] | None = None,
        *,
        channels_last: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}; e.g. torch.float32 or torch.float16")
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable as transform(images, labels), got {transform!r}")
        self.device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device={str(self.device)!r} but CUDA is not available; pass device='cpu' or None")
        self.loader = loader
        self.transform = transform
        self.channels_last = bool(channels_last)
        self.dtype = dtype
        self._to_float = ToFloat(dtype)
        # ONE side stream for the prefetcher's whole life (a stream per epoch leaks streams).
        self.stream = torch.cuda.Stream(device=self.device) if self.device.type == "cuda" else None
        self._loader_iter: Any = None
        self._next_batch: Batch | None = None
        self._active = False

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Batch]:
        """Start a new pass over the loader (closing an unfinished one) and return its iterator.

        The returned iterator is its own ``iter()``, so ``it = iter(prefetcher); for b in it:``
        continues the pass instead of restarting it.
        """
        self._start()
        return self._pass()

    def _pass(self) -> Iterator[Batch]:
        while True:
            try:
                batch = self.__next__()
            except StopIteration:
                return
            yield batch

    def __next__(self) -> Batch:
        if not self._active:
            raise StopIteration
        batch = self._next_batch
        if batch is None:
            self.close()
            raise StopIteration
        if self.stream is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(self.stream)
            _record_stream(batch, current)
        self._next_batch = self._preload()  # batch i + 1 copies while the caller works on batch i
        return batch

    def next(self) -> tuple[torch.Tensor | None, Any]:
        """Apex-style: the next ``(images, labels)``, or ``(None, None)`` once the pass is over.

        Starts a pass if none is running, so the call after ``(None, None)`` begins the next epoch.

        Returns:
            ``(images, labels)`` or ``(None, None)``.
        """
        if not self._active:
            self._start()
        try:
            return self.__next__()
        except StopIteration:
            return None, None

    def close(self) -> None:
        """End the current pass and close the loader's iterator (stops its threads and workers)."""
        self._active = False
        self._next_batch = None
        it, self._loader_iter = self._loader_iter, None
        close = getattr(it, "close", None)
        if close is not None:
            close()

    def state_dict(self) -> dict[str, Any]:
        """The loader's ``state_dict()``, minus the batch this prefetcher has read ahead.

        Returns:
            A state for :meth:`load_state_dict` (or the loader's own) that resumes at the first
            batch the training loop has not received yet.

        Raises:
            TypeError: The loader has no ``state_dict()`` (use :class:`~fastdata.DataLoaderX`).
        """
        if not callable(getattr(self.loader, "state_dict", None)):
            raise TypeError(f"loader {type(self.loader).__name__} has no state_dict(); use fastdata.DataLoaderX")
        state = self.loader.state_dict()
        if self._active and self._next_batch is not None and state.get("in_pass") and state["batches_consumed"]:
            state["batches_consumed"] -= 1  # read ahead, never handed out
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Pass ``state`` to the loader's ``load_state_dict()``; the next pass resumes there.

        Args:
            state: A dict from :meth:`state_dict`.
        """
        self.close()
        self.loader.load_state_dict(state)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from __del__ (e.g. at interpreter exit)
            pass

    def _start(self) -> None:
        self.close()
        self._loader_iter = iter(self.loader)
        self._active = True
        self._next_batch = self._preload()

    def _preload(self) -> Batch | None:
        try:
            batch = next(self._loader_iter)
        except StopIteration:
            return None
        images, labels = _split(batch)
        if self.stream is None:
            return self._process_all(images, labels)
        images = [_pinned(i) for i in images] if isinstance(images, list) else _pinned(images)
        labels = _pinned(labels) if isinstance(labels, torch.Tensor) else labels
        with torch.cuda.stream(self.stream):
            return self._process_all(images, labels)

    def _process_all(self, images: Any, labels: Any) -> Batch:
        """:meth:`_process` one batch, or each of a multi-crop list of batches (the labels once, from the first)."""
        if not isinstance(images, list):
            return self._process(images, labels)
        done = [self._process(crop, labels) for crop in images]
        return [d[0] for d in done], done[0][1]  # type: ignore[return-value]

    def _process(self, images: torch.Tensor, labels: Any) -> Batch:
        """Copy to the device, transform, then apply ``channels_last`` and ``dtype`` (on the side stream on CUDA)."""
        images = images.to(self.device, non_blocking=True)
        if isinstance(labels, torch.Tensor):
            labels = labels.to(self.device, non_blocking=True)
        if self.transform is None:
            images, labels = self._to_float(images, labels)
        else:
            images, labels = self.transform(images, labels)
        if not images.is_floating_point():
            images, labels = self._to_float(images, labels)
        memory_format = torch.channels_last if self.channels_last and images.dim() == 4 else torch.preserve_format
        images = images.to(dtype=self.dtype, memory_format=memory_format)
        return images, labels

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(device={str(self.device)!r}, transform={self.transform!r}, "
                f"channels_last={self.channels_last}, dtype={self.dtype})")


def _pinned(tensor: torch.Tensor) -> torch.Tensor:
    """Pinned for an async copy (the loader did not pin) when on the CPU."""
    return tensor.pin_memory() if tensor.device.type == "cpu" and not tensor.is_pinned() else tensor


def _is_images(value: Any) -> bool:
    """A tensor, or a non-empty list of tensors (multi-crop)."""
    if isinstance(value, list):
        return bool(value) and all(isinstance(v, torch.Tensor) for v in value)
    return isinstance(value, torch.Tensor)


def _split(batch: Any) -> tuple[Any, Any]:
    if not isinstance(batch, (tuple, list)) or len(batch) != 2 or not _is_images(batch[0]):
        raise TypeError(
            f"DataPrefetcher expects (images tensor, labels) batches, got {type(batch).__name__}; "
            "build the loader with collate_fn=fastdata.fast_collate"
        )
    return batch[0], batch[1]


def _record_stream(obj: Any, stream: torch.cuda.Stream) -> None:
    """``record_stream`` every CUDA tensor in ``obj`` (nested tuples, lists and dicts included)."""
    if isinstance(obj, torch.Tensor):
        if obj.is_cuda:
            obj.record_stream(stream)
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            _record_stream(item, stream)
    elif isinstance(obj, dict):
        for item in obj.values():
            _record_stream(item, stream)
