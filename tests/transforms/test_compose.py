"""``DecodeCompose``: a decode-time crop and its augmentations as one decode-time transform. The batch
(``__getitems__``, one kernel call for the crops) and per-sample (``ds[i]``) paths give the same pixels, as do 0 and
2 workers, and a resumed run gives those of an uninterrupted one."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

import fastdata.datasets.batch_decode as batch_decode
from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.decode import native
from fastdata.loader.collate import fast_collate
from fastdata.loader.dataloader import DataLoaderX
from fastdata.sampler.seeding import SampleIndex, sample_generator
from fastdata.transforms import (
    ColorJitter,
    Decode,
    DecodeCompose,
    ImageAugment,
    RandAugment,
    RandomErasing,
    RandomHorizontalFlip,
    RandomResizedCrop,
    ResizeCenterCrop,
    ThreeAugment,
    TrivialAugmentWide,
)
from fastdata.transforms.resolution import SizedBatch, transform_for
from tests.loader.test_augmentation import batches, same


def recipe(size: int = 24, decoder: str = "auto") -> DecodeCompose:
    return DecodeCompose(
        [
            RandomResizedCrop(size, scale=(0.05, 1.0), decoder=decoder),
            RandomHorizontalFlip(),
            RandAugment.from_config("rand-m9-mstd0.5-inc1"),
            ColorJitter(0.3, 0.3, 0.3),
            RandomErasing(0.5, mode="pixel"),
        ]
    )


def keyed(indices, pass_key: int = 11) -> list[SampleIndex]:
    return [SampleIndex(i, pass_key, position) for position, i in enumerate(indices)]


def test_the_crop_then_each_augmentation_draw_from_the_one_generator(packed):
    root, _ = packed
    dataset = ShardDataset(root)
    data = dataset.read(0)[0]
    transform = recipe()
    out = transform(data, rng=np.random.Generator(np.random.Philox(key=4)))
    rng = np.random.Generator(np.random.Philox(key=4))
    image = transform.crop(data, rng=rng)
    for augment in transform.augments:
        image = augment.apply(image, rng)
    assert out.shape == (24, 24, 3) and out.dtype == np.uint8 and np.array_equal(out, image)
    assert transform.uses_rng and transform.output_size == (24, 24)


@pytest.mark.parametrize("decode_threads", [1, 2])
@pytest.mark.parametrize("decoder", ["auto", "opencv"])
def test_batch_and_per_sample_paths_give_the_same_pixels(packed, decoder, decode_threads, monkeypatch):
    root, info = packed
    dataset = ShardDataset(root, transform=recipe(decoder=decoder), decode_threads=decode_threads)
    calls = []
    real = batch_decode.decode_batch_into
    monkeypatch.setattr(batch_decode, "decode_batch_into", lambda *a, **k: calls.append(1) or real(*a, **k))
    indices = keyed(range(len(dataset)))
    batch = dataset.__getitems__(indices)
    for k, index in enumerate(indices):
        image, label = dataset[index]
        assert np.array_equal(batch[k][0], image) and batch[k][1] == label
    batched = decoder == "auto" and native.available()
    assert len(calls) == (1 if batched else 0)  # the crops of the batch in one kernel call where it applies
    again = dataset.__getitems__(keyed(range(len(dataset)), pass_key=12))
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(batch, again, strict=False))  # another pass, other pixels


def test_the_augmentations_change_the_crop(packed):
    root, _ = packed
    plain = ShardDataset(root, transform=RandomResizedCrop(24, scale=(0.05, 1.0)))
    augmented = ShardDataset(
        root,
        transform=DecodeCompose([RandomResizedCrop(24, scale=(0.05, 1.0)), TrivialAugmentWide(), RandomErasing(1.0)]),
    )
    indices = keyed(range(len(plain)))
    assert sum(not np.array_equal(plain[i][0], augmented[i][0]) for i in indices) >= len(indices) // 2


def loader(root, num_workers: int, *, seed: int = 0, persistent: bool = False) -> DataLoaderX:
    dataset = ShardDataset(root, transform=recipe())
    return DataLoaderX(
        dataset,
        batch_size=4,
        shuffle=True,
        num_workers=num_workers,
        collate_fn=fast_collate,
        pin_memory=False,
        generator=torch.Generator().manual_seed(seed),
        persistent_workers=persistent and num_workers > 0,
    )


@pytest.mark.parametrize("packed", ["lmdb"], indirect=True)
def test_same_pixels_with_0_and_2_workers(packed):
    root, _ = packed
    torch.manual_seed(1)
    inline = batches(loader(root, 0), passes=2)
    torch.manual_seed(2)  # the workers' own seeds differ; the pixels must not
    assert same(inline, batches(loader(root, 2), passes=2))
    assert not same(inline, batches(loader(root, 0, seed=1), passes=2))


@pytest.mark.parametrize("packed", ["tfrecord"], indirect=True)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_mid_pass_gives_the_pixels_of_an_uninterrupted_run(packed, num_workers):
    root, _ = packed
    uninterrupted = batches(loader(root, num_workers), passes=2)
    first = loader(root, num_workers)
    before = batches(first, limit=2)
    state = pickle.loads(pickle.dumps(first.state_dict()))
    del first
    resumed = loader(root, num_workers, seed=123)
    resumed.load_state_dict(state)
    assert same(before + batches(resumed, passes=2), uninterrupted)


@pytest.mark.parametrize("packed", ["lmdb"], indirect=True)
def test_a_plain_index_draws_from_torch(packed):
    root, _ = packed
    dataset = ShardDataset(root, transform=recipe())
    torch.manual_seed(3)
    a = dataset[2][0]
    torch.manual_seed(3)
    assert np.array_equal(dataset[2][0], a)
    torch.manual_seed(3)
    batch = dataset.__getitems__([2, 2])  # torch's RNG: record by record, as ds[i] draws
    assert np.array_equal(batch[0][0], a)


@pytest.mark.parametrize("packed", ["lmdb"], indirect=True)
def test_a_resolution_change_keeps_the_augmentations(packed):
    transform = recipe()
    at = transform_for(transform, SizedBatch([0, 1], (16, 16)))
    assert isinstance(at, DecodeCompose) and at.output_size == (16, 16) and at.augments == transform.augments
    root, _ = packed
    dataset = ShardDataset(root, transform=transform)
    images = dataset.__getitems__(SizedBatch(keyed([0, 1, 2]), (16, 16)))
    assert all(image.shape == (16, 16, 3) for image, _ in images)


def test_transforms_pickle_and_repeat(packed):
    root, _ = packed
    data = ShardDataset(root).read(1)[0]
    transform = DecodeCompose([recipe(), ThreeAugment()])  # a compose first is unrolled
    assert len(transform.transforms) == 6
    copy = pickle.loads(pickle.dumps(transform))
    rng = lambda: np.random.Generator(np.random.Philox(key=2))  # noqa: E731
    assert np.array_equal(copy(data, rng=rng()), transform(data, rng=rng()))
    assert "RandomHorizontalFlip" in repr(transform)


class Invert(ImageAugment):
    def apply(self, image, rng):
        return 255 - image


def test_center_crop_then_a_custom_augmentation(packed):
    root, _ = packed
    dataset = ShardDataset(root, transform=DecodeCompose([ResizeCenterCrop(20, 16), Invert()]))
    plain = ShardDataset(root, transform=ResizeCenterCrop(20, 16))
    batch = dataset.__getitems__(keyed([0, 3]))
    assert np.array_equal(batch[1][0], 255 - plain[3][0]) and np.array_equal(dataset[3][0], 255 - plain[3][0])


@pytest.mark.parametrize(
    "items, error, match",
    [
        ([], ValueError, "crop first"),
        ([RandAugment()], TypeError, "decode-time transform"),
        ([Decode()], ValueError, "fixed output size"),
        ([RandomResizedCrop(8), lambda image: image], TypeError, "transform 1"),
    ],
)
def test_bad_compositions_say_what_is_wrong(items, error, match):
    with pytest.raises(error, match=match):
        DecodeCompose(items)


def test_the_sample_generator_continues_after_the_crop():
    """The augmentations draw after the crop's 40 uniforms: keyed by the same sample, they stay reproducible."""
    index = SampleIndex(3, 9, 1)
    a, b = sample_generator(index), sample_generator(index)
    a.random(40)
    b.random(40)
    assert a.random() == b.random()
