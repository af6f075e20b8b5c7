"""The benchmark (``fastdata bench``): fastdata against the pipelines users write, on the same data, in one run.

Never imported by the runtime (``import fastdata`` does not load it).

- :mod:`~fastdata.bench.baselines`: the reference pipelines (torch + PIL, torch + OpenCV).
- :mod:`~fastdata.bench.measure`: page cache, memory sampling, timing one run, the decode bound.
- :mod:`~fastdata.bench.stages`: the per-stage breakdown (CPU time of each stage of each pipeline).
- :mod:`~fastdata.bench.gpu_training`: GPU idle time while a small model trains on a pipeline's batches.
- :mod:`~fastdata.bench.pack_cache`: the image folder packed once per format, reused while unchanged.
- :mod:`~fastdata.bench.pipelines`: the pipelines measured: their names, builders and input files.
- :mod:`~fastdata.bench.runner`: :func:`run_benchmark` and the round-robin schedule.
- :mod:`~fastdata.bench.report`: summary statistics, flags of untrustworthy rows, table and JSON.
- :mod:`~fastdata.bench.chart`: the PNG chart, with its legend.
- :mod:`~fastdata.bench.loader_breakdown`: ``--breakdown``, each stage's time inside real loader runs.
- :mod:`~fastdata.bench.cli`: the ``fastdata bench`` sub-command.
"""

from fastdata.bench.pack_cache import default_cache, prepare_cache
from fastdata.bench.pipelines import PIPELINES
from fastdata.bench.runner import run_benchmark

__all__ = ["PIPELINES", "default_cache", "prepare_cache", "run_benchmark"]
