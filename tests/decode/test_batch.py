"""Batches decoded in place: ShardDataset.__getitems__ -> DecodedBatch -> fast_collate with no copy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import default_collate

from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.decode.batch import DecodedBatch
from fastdata.loader.collate import fast_collate
from fastdata.loader.dataloader import DataLoaderX
from fastdata.transforms import RandomResizedCrop, ResizeCenterCrop


@pytest.fixture()
def dataset(packed):
    root, _ = packed
    return ShardDataset(root, transform=ResizeCenterCrop(40, 32))


def _per_sample(ds, indices):
    return np.stack([ds[i][0] for i in indices]), [ds[i][1] for i in indices]


def test_getitems_decodes_into_one_batch_equal_to_per_sample_reads(dataset):
    indices = [3, 0, 7, 7, len(dataset) - 1]
    batch = dataset.__getitems__(indices)
    assert isinstance(batch, DecodedBatch) and batch.images.shape == (5, 32, 32, 3)
    expected_images, expected_labels = _per_sample(dataset, indices)
    np.testing.assert_array_equal(batch.images.numpy(), expected_images)
    assert batch.labels.tolist() == expected_labels
    # It is also the plain list of (image, label) pairs every collate function expects.
    assert [label for _, label in batch] == expected_labels
    np.testing.assert_array_equal(batch[2][0], expected_images[2])


def test_fast_collate_passes_a_decoded_batch_on_without_copying(dataset):
    batch = dataset.__getitems__([0, 1, 2])
    images, labels = fast_collate(batch)
    assert images.shape == (3, 3, 32, 32) and images.dtype == torch.uint8 and labels.dtype == torch.int64
    assert images.data_ptr() == batch.images.data_ptr()  # the memory the decoder wrote: no copy
    assert images.is_contiguous(memory_format=torch.channels_last)
    reference, _ = fast_collate(list(batch))  # the per-image path (one copy) gives the same values
    assert torch.equal(images, reference)


def test_default_collate_still_works_on_a_decoded_batch(dataset):
    images, labels = default_collate(dataset.__getitems__([4, 5]))
    expected, expected_labels = _per_sample(dataset, [4, 5])
    assert torch.equal(images, torch.from_numpy(expected)) and labels.tolist() == expected_labels


def test_other_transforms_and_target_transforms_keep_the_per_sample_path(packed):
    root, _ = packed
    plain = ShardDataset(root).__getitems__([0, 1])  # variable sizes: no batch buffer
    assert type(plain) is list and len(plain) == 2
    with_target = ShardDataset(root, transform=ResizeCenterCrop(40, 32), target_transform=lambda y: y + 100)
    items = with_target.__getitems__([0, 1])
    assert type(items) is list and all(label >= 100 for _, label in items)


def test_loader_with_workers_delivers_the_in_place_batches(dataset):
    loader = DataLoaderX(dataset, batch_size=4, shuffle=False, num_workers=2, collate_fn=fast_collate)
    seen = 0
    for images, labels in loader:
        indices = list(range(seen, seen + len(labels)))
        expected, expected_labels = _per_sample(dataset, indices)
        assert torch.equal(images.permute(0, 2, 3, 1), torch.from_numpy(expected))
        assert labels.tolist() == expected_labels
        seen += len(labels)
    assert seen == len(dataset)


def test_random_resized_crop_batch_matches_per_sample_under_the_same_seed(packed):
    root, _ = packed
    ds = ShardDataset(root, transform=RandomResizedCrop(24))
    indices = list(range(6))
    torch.manual_seed(7)
    batch = ds.__getitems__(indices)
    torch.manual_seed(7)
    expected, _ = _per_sample(ds, indices)
    np.testing.assert_array_equal(batch.images.numpy(), expected)


@pytest.mark.parametrize(
    "transform",
    [lambda: RandomResizedCrop(24), lambda: ResizeCenterCrop(40, 32)],
    ids=["RandomResizedCrop", "ResizeCenterCrop"],
)
def test_native_kernel_and_forced_fallback_give_the_same_images(packed, monkeypatch, transform):
    from fastdata.decode import native

    if not native.available():
        pytest.skip("the native kernel is not built here (this run is the fallback path)")
    root, _ = packed
    indices = list(range(len(ShardDataset(root))))
    torch.manual_seed(3)
    fast = ShardDataset(root, transform=transform()).__getitems__(indices)
    monkeypatch.setenv("FASTDATA_NATIVE", "0")
    fallback_ds = ShardDataset(root, transform=transform())
    assert not isinstance(fallback_ds.transform.resolve_decoder(), native.NativeJpegDecoder)
    torch.manual_seed(3)
    slow = fallback_ds.__getitems__(indices)
    monkeypatch.delenv("FASTDATA_NATIVE")
    for i in indices:
        data = fallback_ds.read(i)[0]
        cmyk = data[:3] == b"\xff\xd8\xff" and native.read_header(data)[3] in (4, 5)
        if not cmyk:  # the fallback gives CMYK to Pillow at full size (no DCT scaling): other resize input.
            # The kernel's CMYK equals PIL's convert("RGB") exactly (tests/decode/test_native.py).
            np.testing.assert_array_equal(fast.images[i].numpy(), slow.images[i].numpy())
