"""The loader throughput benchmark: end to end through the CLI on a tiny folder, plus its parts."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fastdata import cli
from fastdata._util import optional as _optional
from fastdata.bench import report as bench_report
from fastdata.bench.baselines import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    CV2RandomResizedCropFlip,
    FolderDataset,
    PILToNormalizedTensor,
    cv2_loader,
    pil_train_transform,
    uint8_collate,
)
from fastdata.bench.measure import BatchCheck, MemorySampler, measure_run, set_page_cache
from fastdata.bench.pack_cache import default_cache, prepare_cache
from fastdata.bench.pipelines import PIPELINES
from fastdata.bench.runner import run_benchmark, schedule
from tests.images import encode, natural_image

SIZE = 32
REPEATS = 2
FLOAT = {"torch-pil", "fastdata-lmdb", "fastdata-tfrecord", "fastdata-thread"}
UINT8 = {"torch-cv2", "fastdata-uint8", "fastdata-uint8-thread"}


@pytest.fixture(scope="module")
def jpeg_folder(tmp_path_factory) -> Path:
    """Three classes of photo-like JPEGs (what DALI and the packs see in practice)."""
    root = tmp_path_factory.mktemp("bench_jpegs") / "data"
    rng = np.random.default_rng(1)
    for i in range(18):
        h, w = int(rng.integers(60, 200)), int(rng.integers(60, 200))
        path = root / f"class{i % 3}" / f"{i:03d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode(natural_image(rng, h, w), "JPEG", quality=90))
    return root


@pytest.fixture(scope="module")
def bench_run(clean_image_folder, tmp_path_factory):
    """One full `fastdata bench` run (DALI simulated missing), its JSON, stdout and paths."""
    out = tmp_path_factory.mktemp("bench_out")
    data = out / "data"
    shutil.copytree(clean_image_folder.root, data)
    argv = [
        "bench",
        str(data),
        "--batch-size",
        "4",
        "--workers",
        "1",
        "--repeats",
        str(REPEATS),
        "--size",
        str(SIZE),
        "--breakdown-samples",
        "8",
        "--json",
        str(out / "r.json"),
        "--plot",
        str(out / "r.png"),
        "--no-progress",
        "--no-isolate",
        "--breakdown",
    ]  # in-process keeps the file fast; test_bench_cold_reuses_cache: isolated
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_optional, "has_dali", lambda: False)
        import io
        from contextlib import redirect_stdout

        buf = io.StringIO()
        with redirect_stdout(buf):
            rc = cli.main(argv)
    return {"rc": rc, "stdout": buf.getvalue(), "json": out / "r.json", "png": out / "r.png", "data": data}


def test_bench_cli_end_to_end(bench_run):
    assert bench_run["rc"] == 0, bench_run["stdout"]
    results = json.loads(bench_run["json"].read_text())
    assert {"config", "machine", "dataset", "pipelines", "breakdown", "gpu_training"} <= set(results)
    assert "targets" not in results  # goals belong to the project's checks, not to the user's report
    assert list(results["pipelines"]) == list(PIPELINES)
    assert results["dataset"]["count"] == 13
    assert results["config"]["mode"] == "warm"
    assert results["machine"]["torch"] == torch.__version__
    for name, entry in results["pipelines"].items():
        if name == "dali":
            continue
        assert entry["status"] == "ok", (name, entry.get("note"))
        assert len(entry["runs"]) == REPEATS
        stats = entry["images_per_s"]
        assert 0 < stats["min"] <= stats["median"] <= stats["max"]
    assert results["pipelines"]["torch-pil"]["ratio_to_torch_pil"] == pytest.approx(1.0)
    assert results["pipelines"]["decode-bound"]["fraction_of_decode_bound"] == pytest.approx(1.0)
    pipelines = results["pipelines"]
    for name, bound in (("fastdata-uint8", "decode-bound"), ("torch-cv2", "decode-bound-cv2")):
        fraction = pipelines[name]["images_per_s"]["median"] / pipelines[bound]["images_per_s"]["median"]
        assert pipelines[name]["fraction_of_own_bound"] == pytest.approx(fraction)
    assert "fastdata-tfrecord" in bench_run["stdout"] and "of its bound" in bench_run["stdout"]
    for word in ("targets", "MET", "goal"):
        assert word not in bench_run["stdout"]


def test_bench_flags_too_few_timed_batches(bench_run):
    """13 images in batches of 4, one left out as warm-up: 3 timed batches per run, which the table must flag."""
    results = json.loads(bench_run["json"].read_text())
    for name in FLOAT | UINT8:
        flags = results["pipelines"][name]["flags"]
        assert any(f.startswith("too few timed batches (3 < 10 per run)") for f in flags), (name, flags)
    rows = {line.split()[0]: line for line in bench_run["stdout"].splitlines() if line.strip()}
    assert "]!" in rows["fastdata-uint8"]
    assert "! fastdata-uint8: too few timed batches (3 < 10 per run)" in bench_run["stdout"]
    assert any(f.startswith("a bound over 13 images") for f in results["pipelines"]["decode-bound"]["flags"])


def test_flags_need_enough_batches_and_a_narrow_spread():
    def entry(rates, batches=12):
        runs = [
            {
                "images_per_s": r,
                "first_batch_s": 0.1,
                "peak_pss_mb": 1.0,
                "peak_rss_mb": 1.0,
                "batches": batches,
                "warmup": 2,
                "images": 2560,
            }
            for r in rates
        ]
        return {"status": "ok", "runs": runs}

    entries = {
        "steady": entry([100, 110, 105]),
        "noisy": entry([100, 130, 90]),
        "short": entry([100, 101], 9),
        "decode-bound": {
            "status": "ok",
            "runs": [
                {
                    "images_per_s": 200.0,
                    "first_batch_s": None,
                    "peak_pss_mb": 1.0,
                    "peak_rss_mb": 1.0,
                    "batches": None,
                    "images": 3000,
                }
            ],
        },
    }
    bench_report.summarize_pipelines(entries, batch_size=256)
    assert entries["steady"]["flags"] == [] and entries["decode-bound"]["flags"] == []
    assert entries["noisy"]["flags"] == ["repeats spread 40% of the median (> 25%): a noisy measurement"]
    assert entries["short"]["flags"][0].startswith("too few timed batches (7 < 10 per run)")


def test_bench_loader_breakdown_adds_up(bench_run):
    """--breakdown: fastdata's loader rows carry their counted stages, which add up to cores / (images/s)."""
    results = json.loads(bench_run["json"].read_text())
    for name in ("fastdata-uint8", "fastdata-tfrecord", "fastdata-lmdb", "fastdata-thread", "fastdata-uint8-thread"):
        part = results["pipelines"][name]["loader_breakdown"]
        assert part["runs"] == REPEATS and part["images"] == REPEATS * 9
        assert sum(part["us_per_image"].values()) == pytest.approx(part["total_us"])
        assert part["total_us"] == pytest.approx(part["cores"] * 1e6 / part["images_per_s"])
        assert f"{name}: {part['images']} images in {REPEATS} run(s)" in bench_run["stdout"]
    assert "loader_breakdown" not in results["pipelines"]["torch-cv2"]  # only fastdata's loaders are counted


def test_bench_records_output_contract(bench_run):
    pipelines = json.loads(bench_run["json"].read_text())["pipelines"]
    for name in FLOAT | UINT8:
        output = pipelines[name]["output"]
        assert output["ok"] and output["mismatches"] == 0, (name, output)
        dtype = "float32" if name in FLOAT else "uint8"
        assert output["seen"].startswith(f"images {dtype}[4, 3, {SIZE}, {SIZE}]"), (name, output["seen"])
        assert "labels int64[4]" in output["seen"]
        assert output["batches_checked"] == REPEATS * 4  # 13 images / batch 4 = 4 batches per pass
        assert all(run["warmup_excluded"] and run["images"] == 9 for run in pipelines[name]["runs"])


def test_bench_missing_dali_is_a_note(bench_run):
    dali = json.loads(bench_run["json"].read_text())["pipelines"]["dali"]
    assert dali["status"] == "skipped"
    assert "DALI" in dali["note"] and "pip install" in dali["note"]
    assert "dali" in bench_run["stdout"] and "SKIPPED" in bench_run["stdout"]


def test_bench_runs_round_robin(bench_run):
    config = json.loads(bench_run["json"].read_text())["config"]
    measured = [p for p in PIPELINES if p != "dali"]
    assert config["order"] == [f"{p}#{r}" for r in range(REPEATS) for p in measured]


def test_bench_breakdown_is_measured(bench_run):
    breakdown = json.loads(bench_run["json"].read_text())["breakdown"]
    stages = {s["stage"]: s["ms_per_image"] for s in breakdown["fastdata"]["stages"]}
    from fastdata.decode import native

    decode_stages = (
        ("decode crop region + resize (native)", "crop params")
        if native.available()
        else ("decode (DCT-scaled)", "crop params + crop + resize (cv2)")
    )
    for stage in (
        "read record (tfrecord)",
        "header (read_size)",
        *decode_stages,
        "fast_collate (uint8 NCHW)",
        "flip + normalize (CPU, NormalizeCollate in workers, ring buffers)",
    ):
        assert stages[stage] > 0, stage
    assert breakdown["fastdata"]["cpu_flip_normalize_torch_ops_ms"] > 0
    assert breakdown["fastdata"]["cpu_flip_normalize_fresh_memory_ms"] > 0
    assert breakdown["fastdata"]["total_ms"] == pytest.approx(sum(stages.values()))
    assert breakdown["fastdata"]["baselines_on_same_images"]
    assert sum(breakdown["fastdata"]["dct_scales"].values()) == pytest.approx(1.0, abs=0.01)
    assert breakdown["torch-pil"]["samples"] == breakdown["torch-cv2"]["samples"] == 8


def test_bench_plot(bench_run):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "matplotlib" in bench_run["stdout"]
    else:
        assert bench_run["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_is_a_note(bench_run, monkeypatch, tmp_path):
    results = json.loads(bench_run["json"].read_text())
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert bench_report.plot_results(results, tmp_path / "x.png") is None
    assert not (tmp_path / "x.png").exists()


def test_bench_cold_reuses_cache(bench_run):
    data = bench_run["data"]
    manifest = default_cache(data) / "tfrecord" / "manifest.json"
    before = manifest.stat().st_mtime_ns
    results = run_benchmark(
        data,
        pipelines=["fastdata-uint8"],
        batch_size=4,
        workers=1,
        repeats=1,
        size=SIZE,
        warm=False,
        breakdown_samples=0,
        isolate=True,
        progress=False,
    )
    assert manifest.stat().st_mtime_ns == before  # not repacked
    assert results["config"]["mode"] == "cold" and results["config"]["isolated"]
    entry = results["pipelines"]["fastdata-uint8"]
    assert entry["status"] == "ok" and entry["output"]["ok"]
    assert entry["peak_mem_mb"] > 0 and entry["runs"][0]["images"] == 9


def test_dali_module_unavailable_is_a_note(bench_run, monkeypatch):
    monkeypatch.setattr(_optional, "has_dali", lambda: True)
    monkeypatch.setitem(sys.modules, "fastdata.dali", None)  # `from fastdata.dali import ...` raises ImportError
    results = run_benchmark(
        bench_run["data"],
        pipelines=["dali", "fastdata-uint8"],
        batch_size=4,
        workers=0,
        repeats=1,
        size=SIZE,
        breakdown_samples=0,
        isolate=False,
        progress=False,
    )
    assert results["pipelines"]["dali"]["status"] == "skipped"
    assert "fastdata.dali" in results["pipelines"]["dali"]["note"]
    assert results["pipelines"]["fastdata-uint8"]["status"] == "ok"


@pytest.mark.dali
@pytest.mark.skipif(not _optional.has_dali(), reason="needs nvidia-dali")
def test_bench_dali_pipeline(jpeg_folder):
    results = run_benchmark(
        jpeg_folder,
        pipelines=["dali"],
        batch_size=4,
        workers=1,
        repeats=1,
        size=SIZE,
        breakdown_samples=0,
        isolate=False,
        progress=False,
    )
    dali = results["pipelines"]["dali"]
    assert dali["status"] == "ok", dali.get("note")
    assert dali["output"]["ok"], dali["output"]


def test_prepare_cache_repacks_when_folder_changes(jpeg_folder, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(jpeg_folder, data)
    roots = prepare_cache(data, tmp_path / "cache", formats=("tfrecord",), workers=0, progress=False)
    from fastdata.formats.manifest import Manifest

    assert Manifest.load(roots["tfrecord"]).num_samples == 18
    shutil.copy(data / "class0" / "000.jpg", data / "class1" / "extra.jpg")
    roots = prepare_cache(data, tmp_path / "cache", formats=("tfrecord",), workers=0, progress=False)
    assert Manifest.load(roots["tfrecord"]).num_samples == 19


def test_bad_arguments(clean_image_folder, tmp_path):
    with pytest.raises(ValueError, match="nope"):
        run_benchmark(clean_image_folder.root, pipelines=["torch-pil", "nope"], cache=tmp_path)
    with pytest.raises(ValueError, match="batch_size"):
        run_benchmark(clean_image_folder.root, batch_size=0, cache=tmp_path)
    with pytest.raises(FileNotFoundError):
        run_benchmark(tmp_path / "missing", cache=tmp_path)
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", str(clean_image_folder.root), "--pipelines", "nope"])
    assert exc.value.code == 2


# -- the parts ----------------------------------------------------------------------------------------
def test_schedule_is_round_robin():
    assert schedule(["a", "b", "c"], 2) == [(0, "a"), (0, "b"), (0, "c"), (1, "a"), (1, "b"), (1, "c")]
    assert schedule(["a"], 3) == [(0, "a"), (1, "a"), (2, "a")]
    with pytest.raises(ValueError, match="repeats"):
        schedule(["a"], 0)


def test_summarize_stats():
    stats = bench_report.summarize([30.0, 10.0, 20.0])
    assert (stats["median"], stats["min"], stats["max"], stats["mean"], stats["n"]) == (20.0, 10.0, 30.0, 20.0, 3)
    assert stats["spread_pct"] == pytest.approx(100.0)
    assert stats["stdev"] == pytest.approx(10.0)
    assert bench_report.summarize([1, 2, 3, 10])["median"] == 2.5
    assert bench_report.summarize([5])["stdev"] == 0.0
    with pytest.raises(ValueError):
        bench_report.summarize([])


def test_batch_check_flags_contract_violations():
    check = BatchCheck(8, 4, torch.float32)
    labels = torch.zeros(4, dtype=torch.int64)
    assert check(torch.zeros(4, 3, 8, 8), labels) == 4
    assert check.result()["ok"]
    check(torch.zeros(4, 3, 8, 8, dtype=torch.uint8), labels)  # wrong dtype
    check(torch.zeros(4, 8, 8, 3), labels)  # HWC
    check(torch.zeros(4, 3, 8, 8), labels.int())  # int32 labels
    check(torch.zeros(5, 3, 8, 8), torch.zeros(5, dtype=torch.int64))  # bigger than batch_size
    result = check.result()
    assert not result["ok"] and result["mismatches"] == 4 and result["batches_checked"] == 5
    assert "uint8" in result["first_mismatch"]


def test_measure_run_counts_passes_and_warmup():
    batches = [(torch.zeros(4, 3, 8, 8), torch.zeros(4, dtype=torch.int64))] * 4 + [
        (torch.zeros(2, 3, 8, 8), torch.zeros(2, dtype=torch.int64))
    ]
    run = measure_run(batches, check=BatchCheck(8, 4, torch.float32), epochs=2, warmup=2, progress=False)
    assert (run["batches"], run["passes"], run["images"]) == (10, 2, 36 - 8)
    run = measure_run(batches, check=BatchCheck(8, 4, torch.float32), batches=6, warmup=1, progress=False)
    assert (run["batches"], run["passes"], run["images"]) == (7, 2, 4 * 3 + 2 + 4 * 2)
    run = measure_run(batches[:1], check=BatchCheck(8, 4, torch.float32), warmup=1, progress=False)
    assert not run["warmup_excluded"] and run["images"] == 4  # too short to leave a batch out
    with pytest.raises(ValueError, match="no batch"):
        measure_run([], check=BatchCheck(8, 4, torch.float32), batches=3, progress=False)


def test_page_cache_and_memory_sampler(tmp_path):
    files = [tmp_path / f"f{i}" for i in range(3)]
    for f in files:
        f.write_bytes(b"x" * 100_000)
    assert set_page_cache(files, warm=True) >= 0
    assert set_page_cache(files, warm=False) >= 0
    with MemorySampler(interval=0.01) as mem:
        np.ones(10**6).sum()
    assert mem.peak_rss_mb > 10


def test_baselines_match_torchvision_semantics(jpeg_folder):
    ds = FolderDataset(jpeg_folder, transform=pil_train_transform(SIZE))
    image, label = ds[6]  # class0 holds 6 files, so index 6 is the first of class1
    assert image.dtype == torch.float32 and image.shape == (3, SIZE, SIZE) and label == 1
    white = PILToNormalizedTensor()(__import__("PIL.Image").Image.new("RGB", (5, 4), (255, 0, 255)))
    expected = [
        (1 - IMAGENET_MEAN[0]) / IMAGENET_STD[0],
        -IMAGENET_MEAN[1] / IMAGENET_STD[1],
        (1 - IMAGENET_MEAN[2]) / IMAGENET_STD[2],
    ]
    assert white.shape == (3, 4, 5)
    assert torch.allclose(white[:, 0, 0], torch.tensor(expected), atol=1e-6)
    cv_ds = FolderDataset(jpeg_folder, transform=CV2RandomResizedCropFlip(SIZE), loader=cv2_loader)
    images, labels = uint8_collate([cv_ds[0], cv_ds[12]])
    assert images.dtype == torch.uint8 and images.shape == (2, 3, SIZE, SIZE)
    assert labels.dtype == torch.int64 and labels.tolist() == [0, 2]


@pytest.mark.cuda
def test_gpu_training_measures_idle_time():
    from fastdata.bench.gpu_training import measure_gpu_training

    batches = [(torch.rand(8, 3, SIZE, SIZE), torch.randint(0, 3, (8,))) for _ in range(12)]
    result = measure_gpu_training(batches, num_classes=3, batch_size=8, size=SIZE, warmup=2)
    assert result["steps"] == 10 and result["images_per_s"] > 0
    assert 0.0 <= result["gpu_idle_fraction"] <= 1.0


def test_warmup_batches_leave_that_many_out(bench_run):
    """--warmup-batches: over 2 passes of 4 batches, 4 left out is the whole first pass (the steady state)."""
    results = run_benchmark(
        bench_run["data"],
        pipelines=["fastdata-uint8"],
        batch_size=4,
        workers=1,
        repeats=1,
        epochs=2,
        warmup=4,
        size=SIZE,
        breakdown_samples=0,
        isolate=False,
        progress=False,
    )
    run = results["pipelines"]["fastdata-uint8"]["runs"][0]
    assert (run["batches"], run["warmup"], run["images"]) == (8, 4, 13)
    assert results["config"]["warmup"] == 4 and "first 4 batch(es) not timed" in results["config"]["window"]
    with pytest.raises(SystemExit):
        cli.main(["bench", str(bench_run["data"]), "--warmup-batches", "-1"])


def test_memory_sampler_reads_pss_only_every_few_samples(monkeypatch):
    """PSS walks every mapping (milliseconds per torch process): read every ``pss_every``-th tick, RSS every tick."""
    import psutil

    calls = {"full": 0, "rss": 0}
    full, plain = psutil.Process.memory_full_info, psutil.Process.memory_info

    def counting_full(self):
        calls["full"] += 1
        return full(self)

    def counting_plain(self):
        calls["rss"] += 1
        return plain(self)

    monkeypatch.setattr(psutil.Process, "memory_full_info", counting_full)
    monkeypatch.setattr(psutil.Process, "memory_info", counting_plain)
    monkeypatch.setattr(psutil.Process, "children", lambda self, recursive=False: [])  # this process alone
    mem = MemorySampler(interval=0.01, pss_every=8)
    for tick in range(1, 33):
        mem._ticks = tick
        mem.sample(pss=tick % mem.pss_every == 0)
    assert calls["full"] == 4 and calls["rss"] >= 28
    assert mem.peak_rss_mb > 10 and mem.peak_pss_mb is not None and mem.peak_pss_mb > 1
