"""``fastdata bench --breakdown``: the stage counters inside a real DataLoaderX run (fastdata._util.stage_clock) and
the window that reads them (fastdata.bench.loader_breakdown)."""

from __future__ import annotations

import os

import pytest

from fastdata._util import stage_clock
from fastdata.bench.loader_breakdown import GROUPS, LABELS, BreakdownWindow, combine, format_loader_breakdown

BATCH = 4


@pytest.fixture(scope="module")
def pack(tmp_path_factory, clean_image_folder):
    from fastdata.packing.packer import pack

    out = tmp_path_factory.mktemp("breakdown") / "pack"
    pack(clean_image_folder.root, out, format="tfrecord", workers=0, progress=False)
    return out


def test_counters_are_off_and_free_without_the_variable(monkeypatch, tmp_path):
    monkeypatch.delenv(stage_clock.ENV, raising=False)
    monkeypatch.setattr(stage_clock, "_state", None)
    mark = stage_clock.marker()
    assert mark is stage_clock._noop and stage_clock.marker() is mark
    mark("kernel")
    it = iter([1, 2])
    assert stage_clock.charged(it, "sampler", "fetch") is it  # the loader's sampler is not wrapped
    assert not any(tmp_path.iterdir())


def test_a_new_folder_gets_new_counters(monkeypatch, tmp_path):
    """Two runs in one process (``fastdata bench --no-isolate``): the second window's counters are the second's."""
    monkeypatch.setattr(stage_clock, "_state", None)
    try:
        for run in ("a", "b"):
            (tmp_path / run).mkdir()
            monkeypatch.setenv(stage_clock.ENV, str(tmp_path / run))
            mark = stage_clock.marker()
            mark("read")
            sum(range(100_000))
            mark("consumer")
            assert stage_clock.read_counters(tmp_path / run)[os.getpid()]["read"] > 0, run
        monkeypatch.delenv(stage_clock.ENV)
        assert stage_clock.marker() is stage_clock._noop
    finally:
        monkeypatch.setattr(stage_clock, "_state", None)


def test_one_thread_stages_add_up_to_its_cpu_time(monkeypatch, tmp_path):
    monkeypatch.setenv(stage_clock.ENV, str(tmp_path))
    monkeypatch.setattr(stage_clock, "_state", None)
    try:
        mark = stage_clock.marker()
        import time

        start = time.thread_time_ns()
        mark("read")
        sum(range(300_000))
        mark("kernel")
        sum(range(600_000))
        mark("consumer")
        spent = time.thread_time_ns() - start
        counts = stage_clock.read_counters(tmp_path)[os.getpid()]
        assert counts["kernel"] > counts["read"] > 0
        assert counts["read"] + counts["kernel"] <= spent
        assert counts["worker"] == 0 and counts["fallback"] == 0
    finally:
        monkeypatch.setattr(stage_clock, "_state", None)


def test_a_real_loader_run_counts_every_stage_and_adds_up(pack):
    """Two workers, the timed window after two batches: the workers' stages in the window equal their CPU time in
    it, nothing is counted twice (idle >= 0) and the kernel, the read and the main process's hand-off are seen."""
    from fastdata.datasets.shard_dataset import ShardDataset
    from fastdata.loader.collate import fast_collate
    from fastdata.loader.dataloader import DataLoaderX
    from fastdata.transforms import RandomResizedCrop

    cpu: dict[str, dict[int, int]] = {}
    with BreakdownWindow(cores=os.cpu_count() or 1) as window:
        ds = ShardDataset(pack, transform=RandomResizedCrop(32))
        loader = DataLoaderX(ds, BATCH, shuffle=True, num_workers=2, collate_fn=fast_collate, persistent_workers=True)
        import time

        images, began = 0, None
        for _epoch in range(3):
            for k, (_batch, labels) in enumerate(loader):
                if began is None and k == 1:
                    pids = [w.pid for w in loader._iterator._workers]
                    window.event("start")
                    cpu["start"] = {pid: stage_clock.process_cpu_ns(pid) for pid in pids}
                    began = time.perf_counter()
                elif began is not None:
                    images += len(labels)
        window.event("end")
        cpu["end"] = {pid: stage_clock.process_cpu_ns(pid) for pid in pids}
        seconds = time.perf_counter() - began
        part = window.result(images, seconds)
        loader._iterator._shutdown_workers()
    ns = part["ns"]
    for stage in (
        "kernel",
        "read",
        "sample_rng",
        "header",
        "crop",
        "collate",
        "worker_loop",
        "sampler",
        "fetch",
        "releaser",
        "take",
        "consumer",
    ):
        assert ns[stage] > 0, stage
    workers = sum(ns[s] for s in (*stage_clock.STAGES[:13], "worker_threads"))
    measured = sum(cpu["end"][pid] - cpu["start"][pid] for pid in pids)
    assert abs(workers - measured) <= 0.02 * measured + 2e6, (workers, measured)
    assert ns["idle"] >= -0.01 * part["cores"] * seconds * 1e9  # never more CPU than cores x wall
    assert sum(ns.values()) == pytest.approx(part["cores"] * seconds * 1e9, rel=1e-6)
    combined = combine([part, None])
    assert combined["total_us"] == pytest.approx(part["cores"] * seconds * 1e6 / images)
    text = format_loader_breakdown("fastdata-uint8", combined)
    for title, _stages in GROUPS:
        assert title in text
    assert LABELS["kernel"] in text and LABELS["read"] in text


def test_window_without_a_start_gives_no_breakdown():
    window = BreakdownWindow(cores=2)
    window.event("end")
    assert window.result(100, 1.0) is None
    assert combine([None, None]) is None
