"""``DataPrefetcher``: overlap the host-to-device copy and GPU augmentation with the training step.

While the training loop works on batch ``i``, batch ``i + 1`` is copied to the device on a side
CUDA stream (``non_blocking`` from pinned memory) and transformed there. Before a batch is handed
out the current stream waits for the side stream and every tensor handed out is
``record_stream``-ed on the current stream, so the caching allocator never reuses its memory
early. Without CUDA the same code runs on the CPU, without streams, with the same results.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from fastdata.gpu_transforms import ToFloat
from fastdata.loader.resume import set_rng_states
from fastdata.loader.transform_rng import generator_states, transform_generators

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

    Example:
        >>> from fastdata.gpu_transforms import IMAGENET_MEAN, IMAGENET_STD, Normalize
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
        self.loader: Any = loader  # any iterable of batches; state_dict()/__len__ used where it has them
        self.transform = transform
        self.channels_last = bool(channels_last)
        self.dtype = dtype
        self._to_float = ToFloat(dtype)
        # ONE side stream for the prefetcher's whole life (a stream per epoch leaks streams).
        self.stream = torch.cuda.Stream(device=self.device) if self.device.type == "cuda" else None
        self._loader_iter: Any = None
        self._next_batch: Batch | None = None
        self._active = False
        self._generators_of: tuple[Any, dict[str, torch.Generator]] = (None, {})  # (transform, its generators)
        self._states_before_next: dict[str, torch.Tensor] | None = None  # the generators before the read-ahead batch

    def __len__(self) -> int:
        return len(self.loader)

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
        """The loader's ``state_dict()`` as of the batches the training loop has received.

        The loader's ``state_dict()``, minus the batch this prefetcher has read ahead, plus the transform's
        generators.

        Returns:
            A state for :meth:`load_state_dict` that resumes at the first batch the training loop has not
            received yet: the loader's state (``batches_consumed`` less the read-ahead batch) and, under
            ``"transform_generators"``, the state of every ``torch.Generator`` the transform holds
            (:mod:`fastdata.loader.transform_rng`) as it was before the read-ahead batch was transformed.

        Raises:
            TypeError: The loader has no ``state_dict()`` (use :class:`~fastdata.DataLoaderX`).
        """
        if not callable(getattr(self.loader, "state_dict", None)):
            raise TypeError(f"loader {type(self.loader).__name__} has no state_dict(); use fastdata.DataLoaderX")
        state = self.loader.state_dict()
        read_ahead = (
            self._active and self._next_batch is not None and state.get("in_pass") and state["batches_consumed"]
        )
        if read_ahead:
            state["batches_consumed"] -= 1  # read ahead, never handed out
        generators = self._generators()
        if generators:
            state["transform_generators"] = generator_states(
                generators, self._states_before_next if read_ahead else None
            )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at ``state``: the loader's ``load_state_dict()``, and the transform's generators restored.

        Args:
            state: A dict from :meth:`state_dict`.

        Raises:
            ValueError: ``state`` holds other transform generators than this prefetcher's transform (or the
                loader rejects it).
        """
        state = dict(state)
        saved = state.pop("transform_generators", None)
        generators = self._generators()
        if saved is not None and set(saved) != set(generators):
            raise ValueError(
                f"state has transform generators {sorted(saved)} but this prefetcher's transform has "
                f"{sorted(generators)}; build the transform as when the state was saved"
            )
        if saved is None and generators:
            warnings.warn(
                f"DataPrefetcher.load_state_dict(): the state has no transform generator states (taken by "
                f"an older fastdata?); {sorted(generators)} go on from their current state",
                UserWarning,
                stacklevel=2,
            )
        self.close()
        self.loader.load_state_dict(state)
        if saved is not None:
            set_rng_states(generators, saved)

    def _generators(self) -> dict[str, torch.Generator]:
        """The transform's generators (the walk is redone only when ``transform`` is replaced)."""
        if self._generators_of[0] is not self.transform:
            self._generators_of = (self.transform, transform_generators(self.transform))
        return self._generators_of[1]

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # never raise from __del__ (e.g. at interpreter exit)
            self.close()

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
        generators = self._generators()
        self._states_before_next = {k: g.get_state() for k, g in generators.items()} if generators else None
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
        return (
            f"{type(self).__name__}(device={str(self.device)!r}, transform={self.transform!r}, "
            f"channels_last={self.channels_last}, dtype={self.dtype})"
        )


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
