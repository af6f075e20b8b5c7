"""ShardDataset: decode, labels, transforms, pickling, fork/spawn workers, third-party TFRecords."""

import hashlib
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from fastdata.dataset import ShardDataset
from fastdata.transforms import RandomResizedCrop

DATA = Path(__file__).parent / "data"


def test_len_labels_classes(packed):
    root, info = packed
    ds = ShardDataset(root)
    assert len(ds) == len(info.good)
    assert ds.classes == info.classes and ds.class_to_idx == {"ant": 0, "bee": 1, "cat": 2}
    assert isinstance(ds.targets, np.ndarray) and ds.targets.dtype == np.int64
    assert ds.targets.tolist() == [label for _, label in info.good]


def test_items_are_rgb_uint8_matching_pil(packed):
    root, info = packed
    ds = ShardDataset(root)
    for i, (rel, label) in enumerate(info.good):
        image, got = ds[i]
        reference = np.asarray(Image.open(info.root / rel).convert("RGB"))
        assert image.dtype == np.uint8 and image.ndim == 3 and image.shape == reference.shape, rel
        assert np.abs(image.astype(int) - reference).mean() < 3, rel
        assert got == label
    assert ds[-1][1] == info.good[-1][1]
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_decode_time_and_plain_transforms(packed):
    root, _ = packed
    ds = ShardDataset(root, transform=RandomResizedCrop(32), target_transform=lambda y: y + 100)
    image, label = ds[0]
    assert image.shape == (32, 32, 3) and label == 100
    ds = ShardDataset(root, transform=lambda a: a.shape)  # any other callable gets the decoded array
    assert ds[0][0] == ShardDataset(root)[0][0].shape


def test_metadata_is_numpy_not_lists(packed):
    root, _ = packed
    ds = ShardDataset(root)
    for name, value in vars(ds).items():
        if isinstance(value, (list, tuple)):
            assert len(value) < len(ds) or name == "classes", f"{name} is a Python sequence per sample"


def test_pickles_without_open_handles(packed):
    root, _ = packed
    ds = ShardDataset(root)
    first = ds[0][0]
    assert ds._readers  # opened lazily on first access
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._readers == {}
    assert np.array_equal(clone[0][0], first)
    assert len(pickle.dumps(ds)) < 20_000


def digest(image) -> str:
    return hashlib.sha1(np.ascontiguousarray(image).tobytes()).hexdigest()


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_read_every_sample(packed, context):
    root, _ = packed
    ds = ShardDataset(root)
    expected = sorted((digest(ds[i][0]), int(ds[i][1])) for i in range(len(ds)))  # parent opened readers before fork
    loader = DataLoader(ds, batch_size=None, shuffle=True, num_workers=2, multiprocessing_context=context)
    got = sorted((digest(image), int(label)) for image, label in loader)
    assert got == expected


def test_third_party_tfrecords_with_label_offset(tmp_path):
    shutil.copy(DATA / "tf_written.tfrecord", tmp_path / "train-00000-of-00001")
    ds = ShardDataset(tmp_path, label_offset=-1)
    assert (tmp_path / "train-00000-of-00001.idx").is_file()  # index built and cached
    assert len(ds) == 3
    assert ds.targets.tolist() == [0, 1, 2]
    for k in range(3):
        data, label = ds.read(k)
        assert data == (DATA / f"tf_written_{k}.jpg").read_bytes() and label == k
        assert ds[k][0].ndim == 3
    by_glob = ShardDataset(str(tmp_path / "train-*"))
    assert by_glob.targets.tolist() == [1, 2, 3]
    assert len(ShardDataset([DATA / "tf_written.tfrecord"])) == 3


def test_not_a_dataset(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a fastdata manifest"):
        ShardDataset(tmp_path)


def test_default_collate_in_loader(packed):
    root, _ = packed
    loader = DataLoader(ShardDataset(root, transform=RandomResizedCrop(16)), batch_size=4, num_workers=0)
    images, labels = next(iter(loader))
    assert images.shape == (4, 16, 16, 3) and images.dtype == torch.uint8 and labels.dtype == torch.int64


FORK_AFTER_OPENCV = """
import sys, numpy as np, cv2
import fastdata
from fastdata.transforms import RandomResizedCrop
from torch.utils.data import DataLoader
big = np.zeros((2000, 2000, 3), np.uint8)
for _ in range(3):
    cv2.resize(big, (1500, 1100), interpolation=cv2.INTER_AREA)  # the parent uses OpenCV before forking workers
ds = fastdata.ShardDataset(sys.argv[1], transform=RandomResizedCrop(16))
n = sum(1 for _ in DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork"))
print(n)
"""


def test_fork_workers_after_opencv_use_in_parent(packed):
    """OpenCV's thread pool does not survive fork; fastdata must not deadlock in forked workers."""
    import subprocess
    import sys

    root, info = packed
    result = subprocess.run([sys.executable, "-c", FORK_AFTER_OPENCV, str(root)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(len(info.good))
