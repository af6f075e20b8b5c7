"""MultiCrop: k crops from one region decode, equal to k independent decode-time crops with the same draws."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fastdata import DataLoaderX, DataPrefetcher, ShardDataset, fast_collate
from fastdata.decode import get_decoder, native
from fastdata.decode.scaling import choose_scale, headroom, region_box, resize_into, scaled_box
from fastdata.transforms import RandomResizedCrop
from fastdata.transforms.multicrop import MultiCrop
from tests.images import encode, natural_image

GLOBAL, LOCAL = RandomResizedCrop(224, scale=(0.4, 1.0)), RandomResizedCrop(96, scale=(0.05, 0.4))
DINO = [GLOBAL] * 2 + [LOCAL] * 6


def jpeg(height: int, width: int, seed: int) -> bytes:
    return encode(natural_image(np.random.default_rng(seed), height, width), "JPEG", quality=90)


def independent(crops, data, seed, decoder="auto"):
    """Each crop alone (its own decode), drawing in order from one generator, as MultiCrop draws."""
    rng = np.random.default_rng(seed)
    outs = []
    for crop in crops:
        alone = RandomResizedCrop(crop.size, crop.scale, crop.ratio, resample=crop.resample, decoder=decoder)
        out = np.empty((*crop.size, 3), np.uint8)
        alone.decode_into(data, out, rng=rng)
        outs.append(out)
    return outs


@pytest.fixture
def count_decodes(monkeypatch):
    calls = []
    real = native._region

    def counted(*args, **kwargs):
        calls.append(tuple(args[1]))  # the DCT scale, (num, denom)
        return real(*args, **kwargs)

    monkeypatch.setattr(native, "_region", counted)
    return calls


@pytest.mark.parametrize("seed", range(6))
def test_one_decode_equals_independent_crops_when_scales_agree(seed, count_decodes):
    assert native.available(), "the test set-up builds the native kernel (python setup.py build_ext --inplace)"
    data = jpeg(200, 200, seed)  # every crop of DINO's ranges decodes at 1/1 alone here (a local crop's box stays
    # under 154 pixels, the least that 5/8 turns into 96)
    transform = MultiCrop(DINO)
    crops = transform(data, rng=np.random.default_rng(seed))
    assert count_decodes == [(1, 1)]  # ONE region decode for 8 crops
    count_decodes.clear()
    reference = independent(DINO, data, seed)
    assert len(count_decodes) == 8
    assert [c.shape for c in crops] == [(224, 224, 3)] * 2 + [(96, 96, 3)] * 6
    for got, want in zip(crops, reference, strict=False):
        assert np.abs(got.astype(int) - want.astype(int)).max() == 0


@pytest.mark.parametrize("seed", range(6))
def test_large_photo_one_decode_and_per_scale_decodes(seed, count_decodes):
    data = jpeg(
        1500, 2000, seed
    )  # local crops alone decode at reduced scales (3x their size kept), global ones near 1/1
    rng = np.random.default_rng(seed)
    boxes = MultiCrop(DINO).draw(1500, 2000, rng)
    scales = [
        choose_scale(native.NATIVE_SCALES, b[2], b[3], *(side * headroom(c.resample) for side in c.size))
        for b, c in zip(boxes, DINO, strict=False)
    ]
    # one_decode=False: one decode per distinct scale, every crop exactly its RandomResizedCrop's
    exact = MultiCrop(DINO, one_decode=False)(data, rng=np.random.default_rng(seed))
    assert len(set(scales)) > 1 and len(count_decodes) == len(set(scales))
    for got, want in zip(exact, independent(DINO, data, seed), strict=False):
        assert np.array_equal(got, want)
    # one_decode=True: one decode at the finest scale; each crop as cut from a whole decode at that scale
    count_decodes.clear()
    crops = MultiCrop(DINO)(data, rng=np.random.default_rng(seed))
    finest = max(scales, key=lambda s: s[0] / s[1])
    assert count_decodes == [finest]
    whole = native.decode_full(data, finest)
    for got, box, crop in zip(crops, boxes, DINO, strict=False):
        y0, y1, x0, x1 = scaled_box(box, finest, whole.shape[:2])
        want = np.empty_like(got)
        resize_into(whole[y0:y1, x0:x1], want, crop.resample, region_box(box, finest, y0, x0))
        assert np.array_equal(got, want)


def test_other_decoders_decode_once(monkeypatch):
    decoder = get_decoder("opencv")
    calls = []
    real = type(decoder).decode

    def counted(self, data, *, scale=(1, 1)):
        calls.append(scale)
        return real(self, data, scale=scale)

    monkeypatch.setattr(type(decoder), "decode", counted)
    data = jpeg(300, 240, 7)
    crops = MultiCrop(DINO, decoder=decoder)(data, rng=np.random.default_rng(7))
    assert len(calls) == 1
    calls.clear()
    for got, want in zip(crops, independent(DINO, data, 7, decoder=decoder), strict=False):
        assert np.array_equal(got, want)
    assert len(calls) == 8


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least one"):
        MultiCrop([])
    with pytest.raises(TypeError, match="RandomResizedCrop"):
        MultiCrop([object()])
    with pytest.raises(TypeError, match="decode_into_all"):
        MultiCrop([GLOBAL]).decode_into(b"", np.empty((224, 224, 3), np.uint8))


def test_loader_collate_and_prefetcher_carry_a_list(tmp_path):
    from tests.packs import make_distinct_folder, pack_quietly

    make_distinct_folder(tmp_path / "src", per_class=3, size=(120, 160))
    pack_quietly(tmp_path / "src", tmp_path / "pack", "lmdb")
    small = [RandomResizedCrop(32, scale=(0.4, 1.0))] * 2 + [RandomResizedCrop(16, scale=(0.05, 0.4))] * 3
    dataset = ShardDataset(tmp_path / "pack", transform=MultiCrop(small))
    loader = DataLoaderX(dataset, batch_size=4, num_workers=1, collate_fn=fast_collate, pin_memory=False)
    crops, labels = next(iter(loader))
    assert [tuple(c.shape) for c in crops] == [(4, 3, 32, 32)] * 2 + [(4, 3, 16, 16)] * 3
    assert all(c.dtype == torch.uint8 for c in crops) and labels.shape == (4,)
    images, labels = next(iter(DataPrefetcher(loader, device="cpu")))
    assert isinstance(images, list) and len(images) == 5
    assert all(i.dtype == torch.float32 and i.max() <= 1.0 for i in images) and labels.shape == (4,)


def test_shard_dataset_decodes_a_multicrop_batch_in_place(tmp_path):
    from fastdata.decode.batch import MultiDecodedBatch
    from fastdata.sampler.seeding import SampleIndex
    from tests.packs import make_distinct_folder, pack_quietly

    make_distinct_folder(tmp_path / "src", per_class=2, size=(120, 160))
    pack_quietly(tmp_path / "src", tmp_path / "pack", "lmdb")
    small = [RandomResizedCrop(32, scale=(0.4, 1.0))] * 2 + [RandomResizedCrop(16, scale=(0.05, 0.4))] * 3
    dataset = ShardDataset(tmp_path / "pack", transform=MultiCrop(small))
    indices = [SampleIndex(i, pass_key=5, position=p) for p, i in enumerate([3, 0, 2])]
    batch = dataset.__getitems__(indices)
    assert isinstance(batch, MultiDecodedBatch)
    crops, labels = fast_collate(batch)
    assert [tuple(c.shape) for c in crops] == [(3, 3, 32, 32)] * 2 + [(3, 3, 16, 16)] * 3
    for n, index in enumerate(indices):
        alone, label = dataset[index]
        assert label == labels[n]
        for k in range(5):
            assert np.array_equal(crops[k][n].permute(1, 2, 0).numpy(), alone[k])
