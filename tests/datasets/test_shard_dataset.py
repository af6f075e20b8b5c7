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

from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.transforms import RandomResizedCrop

DATA = Path(__file__).resolve().parents[1] / "data"


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
    assert len(clone._readers) == 0
    assert np.array_equal(clone[0][0], first)
    assert len(pickle.dumps(ds)) < 20_000


def digest(image) -> str:
    return hashlib.sha1(np.ascontiguousarray(image).tobytes()).hexdigest()


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_read_every_sample(packed, context):
    """A user looks at samples of one instance, then trains on another over the same files (and on the first)."""
    root, _ = packed
    looked = ShardDataset(root)
    expected = sorted((digest(looked[i][0]), int(looked[i][1])) for i in range(len(looked)))  # opened before fork
    train = ShardDataset(root)
    train[0]
    loader = DataLoader(train, batch_size=None, shuffle=True, num_workers=2, multiprocessing_context=context)
    got = sorted((digest(image), int(label)) for image, label in loader)
    assert got == expected
    if context == "fork":  # the first instance, too, in workers and still in the parent
        loader = DataLoader(looked, batch_size=None, num_workers=2, multiprocessing_context=context)
        assert sorted((digest(image), int(label)) for image, label in loader) == expected
    assert digest(looked[1][0]) == digest(train[1][0])


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
    result = subprocess.run(
        [sys.executable, "-c", FORK_AFTER_OPENCV, str(root)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(len(info.good))


# --------------------------------------------------------------------------- several instances, re-packs


@pytest.fixture(scope="module")
def distinct_source(tmp_path_factory):
    from tests.packs import make_distinct_folder

    src = tmp_path_factory.mktemp("distinct_src")
    return src, make_distinct_folder(src)


def _read_all(ds, truth) -> tuple[int, list[BaseException]]:
    """Read every sample: count those served (asserting each label is its image's) and collect the errors."""
    good, errors = 0, []
    for i in range(len(ds)):
        try:
            data, label = ds.read(i)
        except Exception as exc:  # noqa: BLE001 - every failure is inspected by the caller
            errors.append(exc)
            continue
        assert truth[data] == label, f"sample {i}: a wrong label"
        good += 1
    return good, errors


class RawShardDataset(ShardDataset):
    """Encoded bytes and label, so a test can check every label against its image."""

    def __getitem__(self, index):
        return self.read(index)


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_repack_under_a_live_reader_gives_a_clear_error_never_a_wrong_label(distinct_source, tmp_path, fmt):
    from fastdata.formats.base import DatasetChangedError
    from tests.packs import pack_quietly

    src, truth = distinct_source
    out = tmp_path / "ds"
    pack_quietly(src, out, fmt)
    older = ShardDataset(out)
    for i in (0, 1, 5):  # shards 0 and 1 are open in this process
        data, label = older.read(i)
        assert truth[data] == label
    pack_quietly(src, out, fmt, shuffle_seed=3, overwrite=True)  # same images, another order: other labels per index
    newer = ShardDataset(out)
    good, errors = _read_all(newer, truth)
    assert good == len(truth) and not errors
    good, errors = _read_all(older, truth)  # its open shards still read the files it opened; the others say why not
    assert good == 10 and len(errors) == len(truth) - 10
    assert all(isinstance(e, DatasetChangedError) and "re-packed" in str(e) for e in errors), errors[:3]


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_repack_under_live_workers_never_gives_a_wrong_label(distinct_source, tmp_path, fmt):
    from fastdata.formats.base import DatasetChangedError
    from fastdata.loader.dataloader import DataLoaderX
    from tests.packs import pack_quietly

    src, truth = distinct_source
    out = tmp_path / "ds"
    pack_quietly(src, out, fmt)
    old = RawShardDataset(out)
    loader = DataLoaderX(old, batch_size=None, num_workers=2, persistent_workers=True, pin_memory=False)
    assert sorted(truth[data] == label for data, label in loader) == [True] * len(truth)  # workers opened every shard
    pack_quietly(src, out, fmt, shuffle_seed=3, overwrite=True)
    served = [(data, int(label)) for data, label in loader]  # the live workers go on with the files they opened
    assert len(served) == len(truth) and all(truth[data] == label for data, label in served)
    with pytest.raises(DatasetChangedError, match="re-packed"):  # new workers of the old dataset: a clear error
        for _ in DataLoaderX(old, batch_size=None, num_workers=2, pin_memory=False):
            pass
    fresh = DataLoaderX(RawShardDataset(out), batch_size=None, num_workers=2, pin_memory=False)
    assert sorted(truth[data] == label for data, label in fresh) == [True] * len(truth)
    del loader


def test_record_label_must_agree_with_targets(packed, tmp_path):
    """A targets.npy whose checksum was updated with it (so it passes the file check) but whose labels
    differ from the records' own: the read is refused, not served with the wrong label."""
    from fastdata.formats.base import CorruptRecordError
    from tests.packs import copy_with_wrong_target

    root = tmp_path / "copy"
    labels = copy_with_wrong_target(packed[0], root, 4)
    ds = ShardDataset(root)
    assert ds.read(3)[1] == labels[3]
    with pytest.raises(CorruptRecordError, match="own label") as info:
        ds.read(4)
    assert "fastdata verify" in str(info.value) and "sample 4" in str(info.value)
