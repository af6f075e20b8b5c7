"""The benchmark (``fastdata bench``): fastdata against the pipelines users write, on the same data, in one run.

Never imported by the runtime (``import fastdata`` does not load it).

- :mod:`~fastdata.bench.baselines`: the reference pipelines (torch + PIL, torch + OpenCV).
- :mod:`~fastdata.bench.measure`: page cache, memory sampling, timing one run, the decode bound.
- :mod:`~fastdata.bench.stages`: the per-stage breakdown and the GPU training step.
- :mod:`~fastdata.bench.runner`: :func:`run_benchmark`, the round-robin schedule and the pack cache.
- :mod:`~fastdata.bench.report`: summary statistics, targets, table, JSON and chart.
- :mod:`~fastdata.bench.cli`: the ``fastdata bench`` sub-command.
"""

from fastdata.bench.runner import PIPELINES, default_cache, prepare_cache, run_benchmark

__all__ = ["PIPELINES", "default_cache", "prepare_cache", "run_benchmark"]
