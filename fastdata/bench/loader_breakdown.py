"""``fastdata bench --breakdown``: where each image's time goes inside a real loader run, summing to the measured time.

A run with the breakdown on sets ``FASTDATA_BREAKDOWN`` (:mod:`fastdata._util.stage_clock`) before its loader starts,
so the loader's main process and every worker count the CPU time of each stage of the data path. The counters are
read when the timed window opens and when it closes; the difference, divided by the images of the window, is each
stage's CPU time per image. The machine's time in the window is ``cores x wall``: what no process of the loader used
(waiting workers, or other processes on a shared machine) is the line "idle", and the CPU of the main process that
no stage names (the interpreter, tqdm) is "main process, other". So the lines add up to ``cores / (images/s)``: the
run's own per-image time on all its cores, nothing estimated.

The kernel's lines (header, crop sampling, region decode, resize, other formats) are the work the kernel bound
(``decode-bound``: the same transform on records read beforehand, one process per core) does per image; every other
line is the price of the loader around it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any

from fastdata._util import stage_clock

__all__ = ["GROUPS", "LABELS", "BreakdownWindow", "combine", "format_loader_breakdown"]

#: What each counted stage is, for the report.
LABELS = {
    "header": "JPEG header",
    "crop": "crop sampling (RandomResizedCrop's draws)",
    "kernel": "region decode (the C kernel)",
    "resize": "resize into the slot (OpenCV, after the kernel)",
    "fallback": "records the kernel does not take (PNG, damaged)",
    "alloc": "batch buffers (the shared-memory ring)",
    "read": "record read (pread, framing CRC, Example parse)",
    "sample_rng": "per-sample generators (seeded augmentation)",
    "setup": "the batch call's setup (DCT scale, box, jobs)",
    "hand_back": "the batch call's hand-back (results checked)",
    "wrap": "the batch returned (DecodedBatch)",
    "collate": "collate (uint8: a channels_last view; float: normalize)",
    "worker_loop": "torch's worker loop (indices in, batch handle out)",
    "worker_threads": "workers' other threads (torch's descriptor sharer)",
    "sampler": "sampler (the batch's indices)",
    "fetch": "main-process hand-off (batch received, indices sent)",
    "releaser": "ring buffers handed back (Releaser)",
    "queue": "background thread's queue",
    "take": "the training loop's take",
    "consumer": "the training loop itself (the benchmark's batch check)",
    "main_other": "main process, other (interpreter, progress bar)",
    "bench_memory": "the benchmark's memory sampler",
    "idle": "idle (waiting workers, or other processes on the machine)",
}
#: The report's sections, in order: (title, stages).
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("kernel (the work the kernel bound does)", ("header", "crop", "kernel", "resize", "fallback")),
    (
        "outside the kernel, in the workers",
        ("alloc", "read", "sample_rng", "setup", "hand_back", "wrap", "collate", "worker_loop", "worker_threads"),
    ),
    (
        "outside the kernel, in the main process",
        ("sampler", "fetch", "releaser", "queue", "take", "consumer", "main_other"),
    ),
    ("not the loader's", ("bench_memory", "idle")),
)
_MAIN = ("sampler", "fetch", "releaser", "queue", "take", "consumer")


class BreakdownWindow:
    """The counters of one run: switched on for the loader built inside the ``with`` block, read at the window's ends.

    Args:
        cores: the CPUs the run may use (its time is ``cores x wall``).
        memory_thread_ns: a callable giving the CPU time of the benchmark's memory sampler thread (or None).

    Example::

        with BreakdownWindow(cores=2) as window:
            loader = build()
            run = measure_run(loader, ..., on_window=window.event)
        part = window.result(run["images"], run["seconds"])
    """

    def __init__(self, cores: int, memory_thread_ns: Any = None) -> None:
        self.cores = cores
        self.memory_thread_ns = memory_thread_ns or (lambda: 0)
        self.folder = ""
        self._previous: str | None = None
        self._marks: dict[str, tuple[dict[int, dict[str, int]], int, int, float]] = {}

    def __enter__(self) -> BreakdownWindow:
        self.folder = tempfile.mkdtemp(prefix="fastdata-breakdown-")
        self._previous = os.environ.get(stage_clock.ENV)
        os.environ[stage_clock.ENV] = self.folder  # read by each process of the loader on its first batch
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is None:
            os.environ.pop(stage_clock.ENV, None)
        else:
            os.environ[stage_clock.ENV] = self._previous
        shutil.rmtree(self.folder, ignore_errors=True)

    def event(self, what: str) -> None:
        """``"start"`` or ``"end"`` of the timed window: read every counter now."""
        self._marks[what] = (
            stage_clock.read_counters(self.folder),
            time.process_time_ns(),
            self.memory_thread_ns(),
            time.perf_counter(),
        )

    def result(self, images: int, seconds: float) -> dict[str, Any] | None:
        """The stage times, images and wall seconds of the timed window.

        Core-nanoseconds of each stage in the window (``ns``), the images and the wall seconds; None without a
        window (a run too short to leave its warm-up out).
        """
        if "start" not in self._marks or "end" not in self._marks or images <= 0:
            return None
        (before, cpu0, mem0, _), (after, cpu1, mem1, _) = self._marks["start"], self._marks["end"]
        ns = dict.fromkeys(LABELS, 0)
        main_pid = os.getpid()
        for pid, counts in after.items():
            start = before.get(pid, {})
            for stage in (*stage_clock.STAGES, "worker_threads"):
                ns[stage] += counts[stage] - start.get(stage, 0)
        main_counted = sum(
            after.get(main_pid, {}).get(s, 0) - before.get(main_pid, {}).get(s, 0) for s in stage_clock.STAGES
        )
        ns["bench_memory"] = max(mem1 - mem0, 0)
        ns["main_other"] = max((cpu1 - cpu0) - main_counted - ns["bench_memory"], 0)
        ns["idle"] = int(self.cores * seconds * 1e9) - sum(ns.values())
        # Not lines of the sum: how the workers' data threads spent the window besides running. "Waiting for a
        # core" is other threads' doing (the machine's other processes, or the loader's own main process);
        # "blocked" is waiting for work (indices) or for the pass to end: the loader's own idle time.
        workers = [pid for pid, counts in after.items() if counts["worker"]]
        waited = sum(after[pid]["worker_wait"] - before.get(pid, {}).get("worker_wait", 0) for pid in workers)
        ran = sum(sum(after[pid][s] - before.get(pid, {}).get(s, 0) for s in stage_clock.STAGES) for pid in workers)
        threads = {
            "waiting_for_core": waited,
            "blocked": max(int(len(workers) * seconds * 1e9) - ran - waited, 0),
            "workers": len(workers),
        }
        return {"ns": ns, "images": images, "seconds": seconds, "cores": self.cores, "worker_threads": threads}


def combine(parts: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The runs' windows together: per-image core-microseconds of every stage (``us_per_image``), and the total."""
    windows = [p for p in parts if p]
    if not windows:
        return None
    images = sum(p["images"] for p in windows)
    ns = {stage: sum(p["ns"][stage] for p in windows) for stage in LABELS}
    per_image = {stage: value / images / 1e3 for stage, value in ns.items()}
    total = sum(per_image.values())
    kernel = sum(per_image[s] for s in GROUPS[0][1])
    seconds = sum(p["seconds"] for p in windows)
    threads = {
        key: sum(p["worker_threads"][key] for p in windows) / images / 1e3 for key in ("waiting_for_core", "blocked")
    }
    return {
        "us_per_image": per_image,
        "total_us": total,
        "kernel_us": kernel,
        "outside_kernel_us": total - kernel - per_image["idle"] - per_image["bench_memory"],
        "images": images,
        "seconds": seconds,
        "images_per_s": images / seconds if seconds else 0.0,
        "cores": windows[0]["cores"],
        "runs": len(windows),
        "worker_threads_us": threads,
        "workers": windows[0]["worker_threads"]["workers"],
    }


def format_loader_breakdown(name: str, part: dict[str, Any]) -> str:
    """One pipeline's breakdown as text: core-microseconds per image by stage, summing to ``cores / (images/s)``."""
    total, per = part["total_us"], part["us_per_image"]
    lines = [
        f"{name}: {part['images']} images in {part['runs']} run(s), {part['images_per_s']:.0f} images/s on "
        f"{part['cores']} cores = {total:.1f} core-us per image (cores x wall / images); the kernel's work "
        f"{part['kernel_us']:.1f} us ({100 * part['kernel_us'] / total:.0f}%)"
    ]
    for title, stages in GROUPS:
        subtotal = sum(per[s] for s in stages)
        lines.append(f"  {title:<64} {subtotal:8.1f} us  {100 * subtotal / total:5.1f}%")
        for stage in stages:
            if per[stage] != 0.0:
                lines.append(f"    {LABELS[stage]:<62} {per[stage]:8.1f} us  {100 * per[stage] / total:5.1f}%")
    threads = part["worker_threads_us"]
    lines.append(
        f"  besides running, the {part['workers']} workers' data threads were blocked (waiting for indices, "
        f"or the pass's end) {threads['blocked']:.1f} us and waiting for a core "
        f"{threads['waiting_for_core']:.1f} us per image (worker-time, not lines of the sum)"
    )
    return "\n".join(lines)
