"""DALILoader: epoch coverage across shards, the batch contract, decoding, seeding, errors."""

from __future__ import annotations

import importlib
import io
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import fastdata
from fastdata._util.optional import has_dali

requires_dali = pytest.mark.skipif(not has_dali(), reason="nvidia-dali is not installed (the `dali` extra)")
NUM_FLAT = 23  # constant-colour images; 2 shards hold 11 and 12, so batch 4 leaves partial batches
NO_NORM = {"mean": (0.0, 0.0, 0.0), "std": (1.0, 1.0, 1.0)}  # outputs in 0..1: pixel = value * 255


def flat_color(i: int) -> tuple[int, int, int]:
    """Sample ``i``'s colour: red identifies the sample, green its label."""
    return 8 * i + 4, 60 * (i % 3) + 20, 200


@pytest.fixture(scope="module")
def flat_pack(tmp_path_factory) -> Path:
    """23 constant-colour PNGs of varied sizes (some smaller than the output) in 6 TFRecord shards."""
    from fastdata.packing.packer import pack

    src = tmp_path_factory.mktemp("flat_src")
    for i in range(NUM_FLAT):
        path = src / f"c{i % 3}" / f"{i:03d}.png"
        path.parent.mkdir(exist_ok=True)
        Image.fromarray(np.full((9 + 5 * i, 70 - 2 * i, 3), flat_color(i), np.uint8)).save(path)
    out = tmp_path_factory.mktemp("flat_tfrecord")
    pack(src, out, format="tfrecord", samples_per_shard=4, workers=0, progress=False)
    return out


def identities(images: torch.Tensor, labels: torch.Tensor) -> list[tuple[int, int, int]]:
    """(label, red, green) of each flat image of a batch normalized with NO_NORM."""
    pixels = (images.float().mean(dim=(2, 3)) * 255).round().to(torch.int64)
    return [(int(lab), int(r), int(g)) for lab, (r, g, _) in zip(labels, pixels.tolist(), strict=False)]


def all_flat_identities() -> list[tuple[int, int, int]]:
    return sorted((i % 3, *flat_color(i)[:2]) for i in range(NUM_FLAT))


def loader(root, batch_size=4, **kwargs):
    from fastdata.dali import DALILoader

    kwargs.setdefault("device", "cpu")
    kwargs.setdefault("num_threads", 1)
    kwargs.setdefault("size", 16)
    return DALILoader(root, batch_size, **kwargs)


def test_missing_dali_raises_install_hint(monkeypatch, tmp_path):
    real_import = importlib.import_module

    def no_dali(name, package=None):
        if name == "nvidia.dali" or name.startswith("nvidia.dali."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real_import(name, package)

    monkeypatch.setattr(importlib, "import_module", no_dali)
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # `import nvidia.dali...` fails too
    monkeypatch.delitem(sys.modules, "fastdata.dali", raising=False)
    monkeypatch.delattr(fastdata, "dali", raising=False)
    dali_module = importlib.import_module("fastdata.dali")  # importing the module needs no DALI
    assert not has_dali()
    with pytest.raises(ImportError, match=r"pip install 'fastdata\[dali\]'"):
        dali_module.DALILoader(tmp_path, 4, device="cpu")


@pytest.mark.dali
@requires_dali
@pytest.mark.parametrize("train", [True, False])
def test_two_shards_cover_every_sample_once_per_epoch(flat_pack, train):
    from fastdata.dali import shard_bounds

    shards = [loader(flat_pack, shard_id=k, num_shards=2, train=train, **NO_NORM) for k in range(2)]
    for shard in shards:
        shard.initial_fill = 3  # far smaller than a shard: the real buffer-shuffle regime
    orders = []
    for epoch in range(2):
        seen = []
        for k, shard in enumerate(shards):
            batches = list(shard)
            begin, end = shard_bounds(NUM_FLAT, k, 2)
            assert len(shard) == len(batches) == math.ceil((end - begin) / 4)
            assert [len(b[1]) for b in batches[:-1]] == [4] * (len(batches) - 1)
            assert len(batches[-1][1]) == (end - begin) % 4 or 4
            assert shard.epoch == epoch + 1
            # identify after the whole epoch: a tensor handed out earlier must not be overwritten
            seen += [ident for images, labels in batches for ident in identities(images, labels)]
        assert sorted(seen) == all_flat_identities()  # each image once, with its own label
        orders.append(seen)
    if train:
        assert orders[0] != orders[1] and orders[0] != sorted(orders[0])
    else:  # eval reads in pack order, shard 0 then shard 1, the same every epoch
        assert orders[0] == orders[1] == [(i % 3, *flat_color(i)[:2]) for i in _pack_order()]


@pytest.mark.dali
@requires_dali
def test_train_shuffles_samples_not_only_shard_files(flat_pack):
    # 23 samples in 6 files of <= 4: a file-order shuffle alone keeps 17 pack-order neighbours together
    order = [
        ident for images, labels in loader(flat_pack, 4, seed=3, **NO_NORM) for ident in identities(images, labels)
    ]
    position = {ident: k for k, ident in enumerate((i % 3, *flat_color(i)[:2]) for i in _pack_order())}
    ranks = [position[ident] for ident in order]
    assert sorted(ranks) == list(range(NUM_FLAT))
    assert sum(b == a + 1 for a, b in zip(ranks, ranks[1:], strict=False)) < 8


def _pack_order() -> list[int]:
    return sorted(range(NUM_FLAT), key=lambda i: (i % 3, i))  # ImageFolder order: class, then name


@pytest.mark.dali
@requires_dali
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("train", [True, False])
def test_batch_contract(flat_pack, dtype, channels_last, train):
    batches = list(loader(flat_pack, 5, size=24, train=train, dtype=dtype, channels_last=channels_last))
    assert [len(labels) for _, labels in batches] == [5, 5, 5, 5, 3]
    for images, labels in batches:
        assert images.shape == (len(labels), 3, 24, 24) and images.dtype == dtype
        assert images.device.type == "cpu" and labels.device.type == "cpu"
        assert labels.dtype == torch.int64 and labels.shape == (len(labels),)
        assert images.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
        assert torch.isfinite(images).all()


@pytest.mark.dali
@requires_dali
@pytest.mark.parametrize("train", [True, False])
def test_normalization_of_a_known_colour(flat_pack, train):
    from fastdata.gpu_transforms import IMAGENET_MEAN, IMAGENET_STD

    seen = 0
    for images, labels in loader(flat_pack, 8, train=train, shuffle=False):
        for image, label in zip(images, labels, strict=False):
            i = _pack_order()[seen]
            expected = (torch.tensor(flat_color(i)) / 255 - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD)
            assert int(label) == i % 3
            torch.testing.assert_close(image.mean(dim=(1, 2)), expected.float(), atol=2e-3, rtol=0)
            assert float(image.std(dim=(1, 2)).max()) < 1e-3  # constant in, constant out
            seen += 1
    assert seen == NUM_FLAT


def pil_eval_reference(data: bytes, size: int, resize_size: int) -> np.ndarray:
    """Per-channel mean of torchvision's eval transform (Resize shorter side + CenterCrop) via PIL."""
    image = Image.open(io.BytesIO(data)).convert("RGB")
    w, h = image.size
    scale = resize_size / min(w, h)
    new = (max(1, round(w * scale)), max(1, round(h * scale)))
    image = image.resize(new, Image.BILINEAR)
    left, top = (new[0] - size) // 2, (new[1] - size) // 2
    return np.asarray(image.crop((left, top, left + size, top + size)), np.float64).mean(axis=(0, 1))


@pytest.mark.dali
@requires_dali
@pytest.mark.parametrize("packed", ["tfrecord"], indirect=True)
@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.cuda)])
def test_every_stored_format_decodes_correctly(packed, device):
    """JPEG (baseline, progressive, 4:4:4, grayscale, CMYK, tiny), PNG (RGB, RGBA, palette), BMP, WebP.

    On ``"gpu"`` the ``"mixed"`` decoder (nvJPEG, with its fallbacks for what it does not decode) must give the same
    batch contract and the same pixels as the CPU decoder, in the same order.
    """
    root, info = packed
    batches = list(loader(root, 4, size=32, train=False, shuffle=False, device=device, **NO_NORM))
    assert all(im.is_cuda == (device == "gpu") and lab.dtype == torch.int64 for im, lab in batches)
    images = torch.cat([im.cpu() for im, _ in batches])
    assert torch.cat([lab.cpu() for _, lab in batches]).tolist() == [label for _, label in info.good]
    assert len(images) == len(info.good)
    for image, (rel, _) in zip(images, info.good, strict=False):
        got = image.double().mean(dim=(1, 2)).numpy() * 255
        expected = pil_eval_reference((info.root / rel).read_bytes(), 32, 37)
        np.testing.assert_allclose(got, expected, atol=4, err_msg=rel)
        if "gray" in rel:
            assert torch.equal(image[0], image[1]) and torch.equal(image[1], image[2])


@pytest.mark.dali
@requires_dali
@pytest.mark.parametrize("packed", ["tfrecord"], indirect=True)
def test_seeded_epochs_are_reproducible_and_resumable(packed):
    root, _ = packed

    def epoch_images(dali_loader):
        return torch.cat([images for images, _ in dali_loader])

    first, again, other = loader(root, 3, seed=7), loader(root, 3, seed=7), loader(root, 3, seed=8)
    epoch0 = epoch_images(first)
    assert torch.equal(epoch0, epoch_images(again))
    assert not torch.equal(epoch0, epoch_images(other))
    epoch1 = epoch_images(first)
    assert not torch.equal(epoch0, epoch1)  # a new shuffle and new crops each epoch
    resumed = loader(root, 3, seed=7)
    resumed.load_state_dict(first.state_dict() | {"epoch": 1})
    assert torch.equal(epoch_images(resumed), epoch1)
    assert first.state_dict() == {"epoch": 2} and resumed.state_dict() == {"epoch": 2}


@pytest.mark.dali
@requires_dali
def test_abandoned_epoch_is_not_counted(flat_pack):
    dali_loader = loader(flat_pack, 4)
    iterator = iter(dali_loader)
    next(iterator)
    iterator.close()
    assert dali_loader.epoch == 0
    assert sum(len(labels) for _, labels in dali_loader) == NUM_FLAT
    assert dali_loader.epoch == 1
    dali_loader.set_epoch(5)
    assert dali_loader.state_dict() == {"epoch": 5}


@pytest.mark.dali
@requires_dali
def test_shard_defaults_come_from_torch_distributed(flat_pack, monkeypatch):
    assert (loader(flat_pack).shard_id, loader(flat_pack).num_shards) == (0, 1)
    monkeypatch.setattr(torch.distributed, "is_available", lambda: True)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda: 1)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 3)
    dali_loader = loader(flat_pack)
    assert (dali_loader.shard_id, dali_loader.num_shards) == (1, 3)
    assert len(dali_loader) == math.ceil((15 - 7) / 4)  # samples [7, 15) of 23
    assert sum(len(labels) for _, labels in dali_loader) == 8


@pytest.mark.dali
@requires_dali
@pytest.mark.parametrize("packed", ["lmdb"], indirect=True)
def test_errors_name_the_argument_and_the_fix(packed, flat_pack, tmp_path):
    lmdb_root, _ = packed
    with pytest.raises(FileNotFoundError, match="--format tfrecord"):
        loader(tmp_path)
    with pytest.raises(ValueError, match="--format tfrecord"):
        loader(lmdb_root)
    with pytest.raises(ValueError, match="device must be 'gpu' or 'cpu'"):
        loader(flat_pack, device="cuda:0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device='cpu'"):
            loader(flat_pack, device="gpu")
    with pytest.raises(ValueError, match="batch_size"):
        loader(flat_pack, 0)
    with pytest.raises(TypeError, match="dtype"):
        loader(flat_pack, dtype=torch.int8)
    with pytest.raises(ValueError, match="shard_id"):
        loader(flat_pack, shard_id=2, num_shards=2)
    with pytest.raises(ValueError, match="resize_size"):
        loader(flat_pack, size=16, resize_size=8)
    with pytest.raises(ValueError, match="mean"):
        loader(flat_pack, mean=(0.5, 0.5))
    with pytest.raises(ValueError, match="num_shards=24"):
        loader(flat_pack, num_shards=24, shard_id=0)
    with pytest.raises(ValueError, match="epoch"):
        loader(flat_pack).load_state_dict({})


@pytest.mark.dali
@requires_dali
@pytest.mark.cuda
@pytest.mark.parametrize("train", [True, False])
def test_gpu_pipeline_hands_out_cuda_batches(flat_pack, train):
    seen = []
    dali_loader = loader(flat_pack, 4, device="gpu", train=train, dtype=torch.float16, channels_last=True, **NO_NORM)
    for images, labels in dali_loader:
        assert images.is_cuda and labels.is_cuda and labels.dtype == torch.int64
        assert images.shape == (len(labels), 3, 16, 16) and images.dtype == torch.float16
        assert images.is_contiguous(memory_format=torch.channels_last)
        seen += identities(images, labels)
    assert sorted(seen) == all_flat_identities()
