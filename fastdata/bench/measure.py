"""Measuring primitives of the benchmark: page cache, memory sampling, batch checks, timed runs.

The decode bound (the kernel alone, one process per core) is :mod:`fastdata.bench.decode_bound`.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from fastdata._util.cpus import available_cpus

logger = logging.getLogger(__name__)
_END = object()

__all__ = [
    "RESAMPLE",
    "BatchCheck",
    "MemorySampler",
    "measure_run",
    "run_isolated",
    "set_page_cache",
    "split_batch",
    "usable_cores",
]

#: The crop resample of fastdata's rows in ``fastdata bench``: 0.2.0's OpenCV one (``"fast"``), the pictures
#: torch-cv2 makes and the speed the docs' tables were measured at. The default, ``"antialias"``, gives torch-pil's
#: pictures at a cost that ``python bench/kernel.py resample`` measures (docs/concepts/crop-decoding.md).
RESAMPLE = "fast"


# -- page cache ----------------------------------------------------------------------------------
def set_page_cache(files: Iterable[Path], *, warm: bool) -> float:
    """Read every file (``warm``) or drop its cached pages (``posix_fadvise(DONTNEED)``); return seconds."""
    start = time.perf_counter()
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            if warm:
                while os.read(fd, 8 << 20):
                    pass
            elif hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return time.perf_counter() - start


# -- measuring -----------------------------------------------------------------------------------
class MemorySampler(threading.Thread):
    """Samples the RSS (and PSS where the OS reports it) of this process and all its children.

    RSS every ``interval`` s (``statm``: µs); PSS, a walk of every mapping (~5 ms a torch worker), every
    ``pss_every``-th sample and at the end: as often as RSS it took ~4% of the machine from the loader measured.
    """

    def __init__(self, interval: float = 0.25, pss_every: int = 8) -> None:
        super().__init__(daemon=True, name="fastdata-bench-memory")
        self.interval = interval
        self.pss_every = max(1, int(pss_every))
        self.peak_rss_mb: float | None = None
        self.peak_pss_mb: float | None = None
        self.cpu_ns = 0  # this thread's CPU time so far (what sampling costs the run)
        self._stop_event = threading.Event()
        self._ticks = 0

    def sample(self, *, pss: bool = True) -> None:
        """Take one sample now (RSS always; PSS when ``pss``)."""
        try:
            import psutil
        except ImportError:
            return
        me = psutil.Process()
        rss = pss_total = 0.0
        has_pss = pss
        for proc in [me, *me.children(recursive=True)]:
            try:
                if pss:
                    info = proc.memory_full_info()
                    has_pss = has_pss and hasattr(info, "pss")
                    pss_total += getattr(info, "pss", 0)
                else:
                    info = proc.memory_info()
            except (psutil.Error, OSError):
                continue
            rss += info.rss
        self.peak_rss_mb = max(self.peak_rss_mb or 0.0, rss / 2**20)
        if has_pss:
            self.peak_pss_mb = max(self.peak_pss_mb or 0.0, pss_total / 2**20)

    def run(self) -> None:  # noqa: D102
        while not self._stop_event.wait(self.interval):
            self._ticks += 1
            self.sample(pss=self._ticks % self.pss_every == 0)
            self.cpu_ns = time.thread_time_ns()

    def __enter__(self) -> MemorySampler:
        self.sample()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop_event.set()
        self.join()
        self.sample()  # the end state, PSS included, in the caller's thread (not charged to the run)


class BatchCheck:
    """Checks every batch against the contract: images ``[N, 3, size, size]`` of one dtype, labels int64 ``[N]``."""

    def __init__(self, size: int, batch_size: int, dtype: torch.dtype) -> None:
        self.size, self.batch_size, self.dtype = size, batch_size, dtype
        self.batches = self.mismatches = 0
        self.first: str | None = None
        self.problem: str | None = None

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> int:
        """Check one batch; return its number of samples."""
        n = int(labels.shape[0]) if labels.dim() else 0
        desc = (
            f"images {str(images.dtype).replace('torch.', '')}{list(images.shape)} on {images.device.type}, "
            f"labels {str(labels.dtype).replace('torch.', '')}{list(labels.shape)}"
        )
        ok = (
            images.dim() == 4
            and tuple(images.shape[1:]) == (3, self.size, self.size)
            and images.dtype == self.dtype
            and labels.dtype == torch.int64
            and labels.dim() == 1
            and images.shape[0] == n <= self.batch_size
        )
        self.batches += 1
        self.first = self.first or desc
        if not ok:
            self.mismatches += 1
            self.problem = self.problem or desc
        return n

    def result(self) -> dict[str, Any]:
        """What was seen, for the results."""
        expected = f"images {str(self.dtype).replace('torch.', '')}[N, 3, {self.size}, {self.size}], labels int64[N]"
        return {
            "expected": expected,
            "seen": self.first,
            "batches_checked": self.batches,
            "mismatches": self.mismatches,
            "first_mismatch": self.problem,
            "ok": self.mismatches == 0,
        }


def split_batch(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``(images, labels)`` of a batch given as a pair, a dict or per-GPU lists (DALI style); nothing is converted."""
    if isinstance(batch, dict):
        batch = (batch.get("data", batch.get("images")), batch.get("label", batch.get("labels")))
    images, labels = batch[0], batch[1]
    if isinstance(images, list) and len(images) == 1:  # a per-GPU list (DALI style)
        images, labels = images[0], labels[0]
    return images, labels


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_run(
    iterable: Iterable,
    *,
    check: BatchCheck,
    epochs: int = 1,
    batches: int | None = None,
    warmup: int = 1,
    device: torch.device = torch.device("cpu"),  # noqa: B008 (an immutable value, made once at import)
    desc: str = "",
    progress: bool = True,
    on_window: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Time whole passes over ``iterable`` (or ``batches`` batches), the first ``warmup`` batches excluded.

    Args:
        iterable: iterated once per pass (a DataLoader, a DataPrefetcher, ...).
        check: checks (and counts) every batch.
        epochs: passes to time (ignored when ``batches`` is given).
        batches: timed batches after the warm-up, over as many passes as needed.
        warmup: batches left out of the timed window (when the run has more than that).
        device: synchronized before the clock is read when it is a CUDA device.
        desc: progress bar label.
        progress: show a tqdm bar.
        on_window: called with ``"start"`` when the timed window opens and ``"end"`` when it closes (the
            loader breakdown reads its counters then).

    Returns:
        ``images`` and ``seconds`` of the timed window, ``images_per_s``, ``first_batch_s`` (from
        ``iter()`` to the first batch), ``batches`` (all of them), ``warmup`` (how many were left out of the
        window) and ``warmup_excluded``.

    Raises:
        ValueError: the iterable yields nothing.
    """
    from tqdm import tqdm

    per_pass = len(iterable) if hasattr(iterable, "__len__") else None  # type: ignore[arg-type]
    stop_at = batches + warmup if batches else None  # batches seen when a batch-counted run stops
    total = stop_at if stop_at is not None else (per_pass * epochs if per_pass else None)
    bar = tqdm(total=total, desc=desc, unit="batch", disable=not progress, leave=False)
    seen = all_images = timed_images = passes = 0
    first = t_start = None
    begin = time.perf_counter()
    try:
        while True:
            it = iter(iterable)  # once: calling iter() on some iterators again restarts them (DataPrefetcher)
            while (batch := next(it, _END)) is not _END:
                n = check(*split_batch(batch))
                seen, all_images = seen + 1, all_images + n
                bar.update()
                if first is None:
                    first = time.perf_counter() - begin
                if seen == warmup:
                    _sync(device)
                    t_start = time.perf_counter()
                    if on_window is not None:
                        on_window("start")
                elif seen > warmup:
                    timed_images += n
                if stop_at is not None and seen >= stop_at:
                    break
            getattr(it, "close", lambda: None)()
            passes += 1
            if seen == 0:
                raise ValueError("the pipeline yielded no batch: is the dataset empty?")
            if (stop_at is not None and seen >= stop_at) or (stop_at is None and passes >= epochs):
                break
        _sync(device)
        end = time.perf_counter()
        if on_window is not None:
            on_window("end")
    finally:
        bar.close()
    excluded = t_start is not None and timed_images > 0
    if t_start is None or not excluded:  # too few batches for a warm-up: time everything from iter()
        t_start, timed_images = begin, all_images
    seconds = end - t_start
    return {
        "images": timed_images,
        "seconds": seconds,
        "images_per_s": timed_images / seconds if seconds else 0.0,
        "first_batch_s": first,
        "batches": seen,
        "warmup": warmup if excluded else 0,
        "passes": passes,
        "warmup_excluded": excluded,
    }


def usable_cores() -> int:
    """The CPUs this process may use (affinity, cgroup quota, SLURM; :func:`fastdata._util.cpus.available_cpus`)."""
    return available_cpus()


def _child(conn: Any, start_method: str, fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> None:
    # A spawned interpreter defaults to spawn; give DataLoader workers and pools the parent's method (fork
    # on Linux), or worker start-up and first-batch latency would differ from a normal training script.
    multiprocessing.set_start_method(start_method, force=True)
    try:
        conn.send(("ok", fn(*args, **kwargs)))
    except BaseException as exc:  # noqa: BLE001 - sent to the parent, which raises it there
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def run_isolated(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a fresh spawned interpreter (a non-daemon process, so it may start workers).

    No memory, threads or allocator state is carried from one measurement to the next.

    Raises:
        RuntimeError: ``fn`` raised (the message names the original exception) or the process died.
    """
    mp = multiprocessing.get_context("spawn")
    receiver, sender = mp.Pipe(duplex=False)
    start_method = multiprocessing.get_start_method()
    proc = mp.Process(target=_child, args=(sender, start_method, fn, args, kwargs), name="fastdata-bench-run")
    proc.start()
    sender.close()
    try:
        status, payload = receiver.recv()
    except EOFError:
        proc.join()
        raise RuntimeError(f"the measurement process died (exit code {proc.exitcode})") from None
    finally:
        receiver.close()
    proc.join()
    if status != "ok":
        raise RuntimeError(payload)
    return payload
