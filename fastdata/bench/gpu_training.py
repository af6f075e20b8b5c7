"""GPU idle time while training: a small convolutional model trained on a pipeline's batches.

Each training step is bracketed by CUDA events, so the time the GPU waits for the next batch is
measured, not estimated; the model alone on one synthetic batch gives the speed to keep up with.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import torch

from fastdata.bench.measure import split_batch

__all__ = ["measure_gpu_training"]


def _dummy_model(num_classes: int) -> torch.nn.Module:
    """A few strided conv layers: enough GPU work per step to show whether the loader keeps up."""
    layers: list[torch.nn.Module] = []
    channels = [3, 32, 64, 128, 256]
    for cin, cout in zip(channels, channels[1:], strict=False):
        layers += [
            torch.nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False),
            torch.nn.BatchNorm2d(cout),
            torch.nn.ReLU(inplace=True),
        ]
    layers += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(channels[-1], num_classes)]
    return torch.nn.Sequential(*layers)


def measure_gpu_training(
    iterable: Iterable, *, num_classes: int, batch_size: int, size: int = 224, max_steps: int = 200, warmup: int = 5
) -> dict[str, Any]:
    """Train a dummy model on the batches of ``iterable`` (one pass at most) and measure GPU idle time.

    Each step is bracketed by CUDA events on the current stream; the GPU is busy inside the
    brackets and idle between them (waiting for the next batch). Also measures the model alone
    on one synthetic device batch (the speed the loader has to keep up with).

    Returns:
        ``images_per_s`` (training with the loader), ``model_only_images_per_s``, ``gpu_busy_s``,
        ``span_s``, ``gpu_idle_fraction`` and ``steps``.

    Raises:
        RuntimeError: CUDA is not available.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("measure_gpu_training needs CUDA; run it on a machine with a GPU")
    device = torch.device("cuda")
    model = _dummy_model(num_classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(images: torch.Tensor, labels: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(images.float()), labels.long()).backward()
        optimizer.step()

    x = torch.randn(batch_size, 3, size, size, device=device)
    y = torch.randint(0, num_classes, (batch_size,), device=device)
    for _ in range(warmup):
        step(x, y)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(20):
        step(x, y)
    torch.cuda.synchronize()
    model_ips = 20 * batch_size / (time.perf_counter() - start)
    events, images, t0 = [], 0, None
    for i, batch in enumerate(iterable):
        images_b, labels_b = split_batch(batch)
        images_b, labels_b = images_b.to(device, non_blocking=True), labels_b.to(device, non_blocking=True)
        if i == warmup:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        if i < warmup:
            step(images_b, labels_b)
            continue
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        step(images_b, labels_b)
        end.record()
        events.append((begin, end))
        images += int(labels_b.shape[0])
        if len(events) >= max_steps:
            break
    torch.cuda.synchronize()
    if not events:
        return {"note": f"too few batches for a GPU measurement (need more than {warmup})"}
    assert t0 is not None  # set at batch `warmup`, before the first timed step
    wall = time.perf_counter() - t0
    busy = sum(b.elapsed_time(e) for b, e in events) / 1e3
    span = events[0][0].elapsed_time(events[-1][1]) / 1e3
    return {
        "images_per_s": images / wall,
        "model_only_images_per_s": model_ips,
        "gpu_busy_s": busy,
        "span_s": span,
        "gpu_idle_fraction": max(0.0, 1.0 - busy / span) if span else 0.0,
        "steps": len(events),
    }
