"""Progressive resolution: set_resolution between passes with persistent workers, pixel-identical to a loader
built at that size; resume mid-pass restores position and size; ResizeCenterCrop at another size; ramp()."""

from __future__ import annotations

import json

import pytest
import torch

from fastdata import DataLoaderX, DistributedSampler, ShardDataset, fast_collate
from fastdata.transforms import DecodeTransform, RandomResizedCrop, ResizeCenterCrop
from fastdata.transforms.resolution import SizedBatch, ramp, transform_at, transform_for
from tests.packs import make_distinct_folder, pack_quietly

SCHEDULE = [16, 24, (20, 28)]
BATCH = 4


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    src = tmp_path_factory.mktemp("res_src")
    make_distinct_folder(src, per_class=7, size=(40, 56))  # 14 JPEGs: 3 full batches and one of 2
    out = tmp_path_factory.mktemp("res_pack")
    pack_quietly(src, out, "lmdb")
    return out


def loader_at(root, size, workers=2, transform=RandomResizedCrop):
    dataset = ShardDataset(root, transform=transform(size) if transform is RandomResizedCrop else transform)
    sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=3)
    return DataLoaderX(
        dataset,
        batch_size=BATCH,
        sampler=sampler,
        num_workers=workers,
        collate_fn=fast_collate,
        persistent_workers=workers > 0,
        pin_memory=False,
    )


def one_pass(loader, epoch):
    loader.sampler.set_epoch(epoch)
    return [(images.clone(), labels.clone()) for images, labels in loader]


def hw(size):
    return (size, size) if isinstance(size, int) else tuple(size)


def test_schedule_with_persistent_workers_equals_loaders_built_at_each_size(root):
    loader = loader_at(root, 16)
    pids = set()
    scheduled = []
    for epoch, size in enumerate(SCHEDULE):
        loader.set_resolution(size)
        scheduled.append(one_pass(loader, epoch))
        pids.add(tuple(w.pid for w in loader._iterator._workers))
    assert len(pids) == 1  # the same worker processes served every size
    for epoch, size in enumerate(SCHEDULE):
        reference = one_pass(loader_at(root, size, workers=0), epoch)
        assert len(scheduled[epoch]) == len(reference) == 4
        for (images, labels), (ref_images, ref_labels) in zip(scheduled[epoch], reference, strict=False):
            assert tuple(images.shape[2:]) == hw(size)
            assert torch.equal(labels, ref_labels)
            assert (images.int() - ref_images.int()).abs().max().item() == 0  # pixel-identical


def test_resume_mid_pass_restores_position_and_size(root):
    loader = loader_at(root, 16)
    loader.set_resolution(24)
    loader.sampler.set_epoch(1)
    it = iter(loader)
    first = [next(it)[0].clone() for _ in range(2)]
    state = json.loads(json.dumps(loader.state_dict()))
    rest = [images.clone() for images, _ in it]
    assert state["resolution"] == [24, 24] and len(first) + len(rest) == 4
    resumed = loader_at(root, 16, workers=1)  # built at the first size; the state says 24
    resumed.load_state_dict(state)
    resumed.sampler.set_epoch(1)
    assert resumed.resolution == (24, 24)
    again = [images.clone() for images, _ in resumed]
    assert len(again) == len(rest)
    for a, b in zip(again, rest, strict=False):
        assert a.shape[2:] == (24, 24) and torch.equal(a, b)


def test_validation_resize_center_crop_at_another_size(root):
    dataset = ShardDataset(root, transform=ResizeCenterCrop(32, 28))
    val = DataLoaderX(dataset, batch_size=BATCH, num_workers=1, collate_fn=fast_collate, pin_memory=False)
    val.set_resolution(20)
    images, _ = next(iter(val))
    direct = ResizeCenterCrop(23, 20)  # 32 * 20 / 28 = 22.9: the resize keeps its ratio to the crop
    assert transform_at(ResizeCenterCrop(32, 28), (20, 20)).resize == 23
    expected = torch.stack([torch.from_numpy(direct(dataset.read(i)[0])) for i in range(BATCH)]).permute(0, 3, 1, 2)
    assert images.shape == (BATCH, 3, 20, 20) and torch.equal(images, expected)


def test_a_one_element_resize_scales_as_its_pair():
    # (s,) resizes to (s, s): at another crop size it scales per side, as (s, s) does
    pair = transform_at(ResizeCenterCrop((256, 256), (224, 160)), (224, 80))
    single = transform_at(ResizeCenterCrop((256,), (224, 160)), (224, 80))
    assert pair.resize == single.resize == (256, 128)


class Thumbnail(DecodeTransform):
    output_size = (8, 8)

    def __call__(self, data):
        raise AssertionError("not called")


def test_transform_for_and_ramp():
    crop = RandomResizedCrop(16)
    assert transform_for(crop, [1, 2]) is crop
    at = transform_for(crop, SizedBatch([1, 2], (24, 24)))
    assert at.output_size == (24, 24) and crop.output_size == (16, 16) and at.scale == crop.scale
    assert transform_for(crop, SizedBatch([3], (24, 24))) is at  # cached per size
    with pytest.raises(TypeError, match="no crop size"):
        transform_at(Thumbnail(), (4, 4))
    with pytest.raises(ValueError, match="resolution"):
        DataLoaderX(list(range(4))).set_resolution(0)
    assert [ramp(e, 160, 192, 11, 13) for e in (0, 11, 12, 13, 15)] == [160, 160, 192, 192, 192]
    assert [ramp(e, 160, 192, 65, 76) for e in (65, 70, 71, 76)] == [160, 160, 192, 192]
