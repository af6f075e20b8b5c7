"""``fastdata bench --peers``: every peer's writer and loader on a tiny folder, and the not-installed/failed rows.

The images of each class have their own colour, so a label that travels with the wrong image is caught after
decode, crop and flip. Peers in the test set-up (``webdataset`` in the ``test`` extra, DALI in the ``dali``
extra) must run; the others run where installed and otherwise must be reported as not installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fastdata.bench.peers import PEERS, harness, load_peer, unavailable
from fastdata.bench.runner import run_benchmark
from tests.images import encode

IN_TEST_SETUP = {"webdataset", "dali-files"}
COLOURS = np.array([[220, 30, 30], [30, 220, 30], [30, 30, 220]], dtype=np.float64)
SIZE, BATCH = 32, 8


@pytest.fixture(scope="module")
def colour_folder(tmp_path_factory) -> Path:
    """21 images in 3 classes (one colour each, some noise, odd sizes), one of them a PNG."""
    root = tmp_path_factory.mktemp("peer_src") / "data"
    rng = np.random.default_rng(3)
    for i in range(21):
        label = i % 3
        h, w = int(rng.integers(40, 120)), int(rng.integers(40, 120))
        pixels = np.clip(COLOURS[label] + rng.normal(0, 8, (h, w, 3)), 0, 255).astype(np.uint8)
        fmt, ext = ("PNG", "png") if i == 5 else ("JPEG", "jpg")
        path = root / f"class{label}" / f"{i:03d}.{ext}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode(pixels, fmt, **({"quality": 95} if fmt == "JPEG" else {})))
    return root


def _files(root: Path) -> tuple[list[str], list[int]]:
    from fastdata.packing.scan import scan_image_folder

    scan = scan_image_folder(root)
    return [str(root / p) for p in scan.paths], list(scan.labels)


def _check_batches(loader, count: int) -> int:
    if hasattr(loader, "__len__"):  # the benchmark's progress bar asks for it
        assert len(loader) >= -(-count // BATCH)
    seen = 0
    for _ in range(2):  # two passes: every peer must start a new pass on iter()
        labels_seen = []
        for images, labels in loader:
            assert images.dtype == torch.uint8 and images.dim() == 4, (images.dtype, images.shape)
            assert tuple(images.shape[1:]) == (3, SIZE, SIZE) and 0 < images.shape[0] <= BATCH
            assert labels.dtype == torch.int64 and labels.shape == (images.shape[0],)
            means = images.double().mean(dim=(2, 3)).numpy()  # [N, 3] mean colour
            nearest = np.argmin(((means[:, None, :] - COLOURS[None]) ** 2).sum(-1), axis=1)
            assert nearest.tolist() == labels.tolist(), "a label travelled with another class's image"
            labels_seen += labels.tolist()
            seen += 1
        assert sorted(labels_seen) == sorted([i % 3 for i in range(count)]), "a pass is not one pass over the data"
    return seen


@pytest.mark.parametrize("name", list(PEERS))
def test_peer_converts_and_loads(name, colour_folder, tmp_path):
    reason = unavailable(name)
    if reason is not None:  # not in the test set-up and not installed here: reported, with how to install it
        assert name not in IN_TEST_SETUP, f"{name} is part of the test set-up but cannot run: {reason}"
        assert reason.startswith(("not installed: ", "cannot run here: ")) and "install: " in reason
        assert "\n" not in reason
        return
    images, labels = _files(colour_folder)
    out = tmp_path / name
    out.mkdir()
    stats = load_peer(name).convert(images, labels, out)
    assert any(out.iterdir()) and isinstance(stats.get("note"), str)
    iterable, close = harness.build(name, out, BATCH, 1, SIZE)
    try:
        assert _check_batches(iterable, len(images)) >= 2 * -(-len(images) // BATCH) - 2
    finally:
        close()


def test_missing_and_failing_peers_are_reported(colour_folder, tmp_path, monkeypatch):
    """One run: webdataset measured beside fastdata-uint8, litdata faked missing, dali-files' writer failing."""
    monkeypatch.setitem(sys.modules, "litdata", None)  # `import litdata` raises ImportError
    assert unavailable("litdata").startswith("not installed: ModuleNotFoundError")

    def broken(*args, **kwargs):
        raise OSError("disk full\nsecond line")

    monkeypatch.setattr(load_peer("dali-files"), "convert", broken)
    results = run_benchmark(
        colour_folder,
        pipelines=["fastdata-uint8"],
        peers=["webdataset", "litdata", "dali-files"],
        batch_size=BATCH,
        workers=1,
        repeats=2,
        size=SIZE,
        cache=tmp_path / "cache",
        breakdown_samples=0,
        isolate=False,
        progress=False,
    )
    entries = results["pipelines"]
    assert [o for o in results["config"]["order"]] == [
        "fastdata-uint8#0",
        "webdataset#0",
        "fastdata-uint8#1",
        "webdataset#1",
    ]
    assert entries["litdata"]["status"] == "skipped" and "not installed" in entries["litdata"]["note"]
    assert entries["dali-files"]["status"] == "failed"
    assert entries["dali-files"]["note"] == "conversion failed: disk full"
    web = entries["webdataset"]
    assert web["status"] == "ok" and len(web["runs"]) == 2 and web["output"]["ok"]
    assert web["conversion"]["convert_s"] > 0
    packed = entries["fastdata-uint8"]["conversion"]  # fastdata's own conversion, the TFRecord pack
    assert packed["convert_s"] > 0 and packed["bytes"] > 0
    assert web["conversion"]["bytes"] >= sum(Path(p).stat().st_size for p in _files(colour_folder)[0])
    table = harness.format_peer_table(results)
    rows = {line.split()[0]: line for line in table.splitlines()[2:]}
    assert set(rows) == {"fastdata-uint8", "webdataset", "litdata", "dali-files", "best"}
    assert "SKIPPED: not installed" in rows["litdata"] and "FAILED: conversion failed" in rows["dali-files"]
    ratio = entries["fastdata-uint8"]["images_per_s"]["median"] / web["images_per_s"]["median"]
    assert rows["best"] == f"best peer: webdataset; fastdata-uint8 / best peer = {ratio:.2f}x"


@pytest.mark.parametrize("keep_bytes", [False, True])
def test_fastdata_row_says_what_its_pack_stores(keep_bytes, colour_folder, tmp_path):
    """The peer table's note for fastdata comes from the pack's manifest: re-coded records, or the source bytes."""
    from fastdata.packing.packer import pack

    manifest = pack(
        colour_folder, tmp_path / "pack", format="tfrecord", workers=0, progress=False, keep_bytes=keep_bytes
    )
    stats = harness.pack_stats(tmp_path / "pack", tmp_path / "no-stamp.json")
    assert bool(manifest.transcoded_count) is not keep_bytes  # the extension is built by the test set-up
    expected = "of the original bytes" if keep_bytes else "re-coded losslessly"
    assert expected in stats["note"], stats["note"]
    assert stats["bytes"] > 0 and "convert_s" not in stats


def _fake_torchcodec(monkeypatch, decoders) -> None:
    """A ``torchcodec`` package whose ``decoders`` module is ``decoders`` (a module object)."""
    import types

    package = types.ModuleType("torchcodec")
    package.__path__ = []  # a package, so that `torchcodec.decoders` is looked up in sys.modules
    monkeypatch.setitem(sys.modules, "torchcodec", package)
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", decoders)


def test_torchcodec_linked_against_cuda_torch_is_one_line(monkeypatch):
    """torchcodec 0.17 beside a CPU-only torch: its image library fails to load on libnvrtc.so.13; the row says so."""
    import types

    decoders = types.ModuleType("torchcodec.decoders")

    def load_fails(name):
        try:
            raise OSError("libnvrtc.so.13: cannot open shared object file: No such file or directory")
        except OSError as exc:
            raise OSError("Could not load this library: .../torchcodec/libtorchcodec_image.so") from exc

    decoders.__getattr__ = load_fails
    _fake_torchcodec(monkeypatch, decoders)
    monkeypatch.setattr(torch.version, "cuda", None)
    reason = unavailable("torchcodec")
    assert reason.startswith(
        "cannot run here: ImportError: torchcodec is installed but its image library links "
        "the CUDA build of torch (libc10_cuda.so, libnvrtc.so.13)"
    ), reason
    assert "OSError: libnvrtc.so.13: cannot open shared object file" in reason and "\n" not in reason


def test_torchcodec_peer_loads(monkeypatch, colour_folder, tmp_path):
    """The peer's own code (file list, decode, torchvision v2 crop and flip on tensors, default_collate), with a
    stand-in for torchcodec's decode_image (uint8 CHW, as it returns) where torchcodec cannot run."""
    if unavailable("torchcodec") is not None:
        import io
        import types

        from PIL import Image

        def decode_image(data: bytes) -> torch.Tensor:
            image = Image.open(io.BytesIO(data))
            return (
                torch.from_numpy(np.array(image.convert("L" if image.mode == "L" else "RGB")))
                .reshape(image.height, image.width, -1)
                .permute(2, 0, 1)
            )

        decoders = types.ModuleType("torchcodec.decoders")
        decoders.decode_image = decode_image
        _fake_torchcodec(monkeypatch, decoders)
    images, labels = _files(colour_folder)
    peer = load_peer("torchcodec")
    assert "file list" in peer.convert(images, labels, tmp_path)["note"]
    iterable, close = harness.build("torchcodec", tmp_path, BATCH, 0, SIZE)
    try:
        assert _check_batches(iterable, len(images)) == 2 * -(-len(images) // BATCH)
    finally:
        close()
