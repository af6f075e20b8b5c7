"""timm's train.py on fastdata: ``fastdata.integrations.timm`` called the way train.py calls timm's data functions.

``tools/timm_train.py`` runs train.py itself (which is not in the timm wheel); this checks the same code path here:
``create_dataset``/``create_loader`` with the keyword arguments train.py passes (its defaults), a few training steps
on what the loader yields, and the attributes train.py reads from the loader.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import sys
from pathlib import Path

import pytest
import torch

from fastdata import ShardDataset
from fastdata.integrations.timm import create_dataset, create_loader
from fastdata.transforms import ResizeCenterCrop
from tests.trainers.common import CROP, make_pack, tiny_model

MEAN, STD = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)


def _dataset_kwargs(is_training: bool) -> dict:
    """What train.py passes to create_dataset besides name, root and split (train.py's defaults)."""
    kwargs = dict(
        is_training=is_training,
        class_map="",
        download=False,
        batch_size=8,
        input_img_mode="RGB",
        input_key=None,
        target_key=None,
        num_samples=None,
        trust_remote_code=False,
    )
    if is_training:
        kwargs.update(seed=42, repeats=0)
    return kwargs


def _loader_kwargs(is_training: bool, num_workers: int = 2) -> dict:
    """What train.py passes to create_loader (its defaults; reprob raised so random erasing runs too)."""
    common = dict(
        mean=MEAN,
        std=STD,
        pin_memory=False,
        img_dtype=torch.float32,
        device=torch.device("cpu"),
        distributed=False,
        use_prefetcher=True,
        input_size=(3, CROP, CROP),
    )
    if not is_training:
        return dict(
            common, batch_size=8, is_training=False, interpolation="bilinear", num_workers=num_workers, crop_pct=0.875
        )
    return dict(
        common,
        batch_size=8,
        is_training=True,
        no_aug=False,
        re_prob=0.25,
        re_mode="pixel",
        re_count=1,
        re_split=False,
        train_crop_mode=None,
        scale=None,
        ratio=None,
        hflip=0.5,
        vflip=0.0,
        color_jitter=0.4,
        color_jitter_prob=None,
        grayscale_prob=None,
        gaussian_blur_prob=None,
        auto_augment=None,
        num_aug_repeats=0,
        num_aug_splits=0,
        interpolation="random",
        num_workers=num_workers,
        worker_seeding="all",
        input_size_choices=None,
        batch_size_choices=None,
        batch_choice_weights=None,
        batch_choice_seed=42,
        batch_choice_schedule="constant",
        batch_schedule_epochs=None,
        batch_schedule_spread=0.65,
        batch_schedule_random_mix=0.1,
        num_batches=None,
        collate_fn=None,
        use_multi_epochs_loader=False,
    )


@pytest.fixture(scope="module")
def pack(tmp_path_factory) -> Path:
    return make_pack(tmp_path_factory.mktemp("timm"))


def test_train_py_calls_give_batches_a_model_trains_on(pack):
    loader = create_loader(
        create_dataset("", root=pack, split="train", **_dataset_kwargs(True)), **_loader_kwargs(True)
    )
    assert len(loader) == 24 // 8 and loader.mixup_enabled is False  # train.py drops the last partial batch
    assert loader.dataset is loader.loader.dataset and loader.batch_sampler.batch_size == 8
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(2):  # two epochs, as train.py iterates the loader once per epoch
        for images, labels in loader:
            assert images.shape == (8, 3, CROP, CROP) and images.dtype == torch.float32
            assert labels.dtype == torch.int64 and set(labels.tolist()) <= {0, 1}
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    assert len(losses) == 6 and all(torch.isfinite(torch.tensor(losses)))


def test_the_same_seed_gives_the_same_batches(pack):
    def first_pass():
        loader = create_loader(
            create_dataset("", root=pack, split="train", **_dataset_kwargs(True)),
            **dict(_loader_kwargs(True, num_workers=0), re_prob=0.0),
        )
        torch.manual_seed(0)  # the device transforms draw from torch's default generator, as timm's do
        return [(images.clone(), labels.clone()) for images, labels in loader]

    one, two = first_pass(), first_pass()
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(one, two, strict=False))


def test_evaluation_is_a_normalized_center_crop(pack):
    loader = create_loader(
        create_dataset("", root=pack, split="validation", **_dataset_kwargs(False)),
        **_loader_kwargs(False, num_workers=0),
    )
    reference = ShardDataset(pack, transform=ResizeCenterCrop(int(CROP / 0.875), CROP))
    images, labels = next(iter(loader))
    for i in range(len(labels)):
        pixels, label = reference[i]
        want = (
            torch.as_tensor(pixels).permute(2, 0, 1).float() / 255 - torch.tensor(MEAN)[:, None, None]
        ) / torch.tensor(STD)[:, None, None]
        assert label == labels[i] and torch.allclose(images[i], want, atol=1e-5)


@pytest.mark.parametrize(
    "change, flag",
    [
        (dict(auto_augment="augmix-m5-w4-d2"), "--aa"),
        (dict(auto_augment="v0"), "--aa"),
        (dict(auto_augment="3a", augment_at="device"), "augment_at='decode'"),
        (dict(auto_augment="rand-m9", interpolation="lanczos"), "--train-interpolation"),
        (dict(augment_at="gpu"), "augment_at"),
        (dict(num_aug_splits=3), "--aug-splits"),
        (dict(collate_fn=lambda batch: batch), "--mixup"),
        (dict(input_size_choices=[(3, 8, 8)]), "--train-img-sizes"),
    ],
)
def test_a_recipe_fastdata_does_not_reproduce_is_refused(pack, change, flag):
    dataset = create_dataset("", root=pack, split="train", **_dataset_kwargs(True))
    with pytest.raises(ValueError, match=flag):
        create_loader(dataset, **dict(_loader_kwargs(True), **change))


def test_auto_augment_runs_in_the_workers_without_a_cuda_device(pack):
    """train.py's --aa rand-m9-mstd0.5-inc1 --reprob 0.25 on a CPU: flip, timm's RandAugment and random erasing on
    the uint8 crop in the workers (timm's order), colour jitter off (as timm turns it off under --aa); the prefetcher
    only normalizes."""
    from fastdata import transforms as T
    from fastdata.gpu_transforms import Normalize

    dataset = create_dataset("", root=pack, split="train", **_dataset_kwargs(True))
    loader = create_loader(dataset, **dict(_loader_kwargs(True), auto_augment="rand-m9-mstd0.5-inc1"))
    transform = loader.dataset.transform
    assert isinstance(transform, T.DecodeCompose)
    assert [type(t) for t in transform.transforms] == [
        T.RandomResizedCrop,
        T.RandomHorizontalFlip,
        T.TimmRandAugment,
        T.RandomErasing,
    ]
    policy, erasing = transform.transforms[2], transform.transforms[3]
    assert (policy.magnitude, policy.magnitude_std, policy.increasing, policy.interpolation) == (9, 0.5, True, "random")
    assert policy.fill == tuple(round(255 * m) for m in MEAN) and policy.hparams["translate_const"] == int(CROP * 0.45)
    assert (erasing.probability, erasing.mode, erasing.mean, erasing.std) == (0.25, "pixel", MEAN, STD)
    assert [type(t) for t in loader.prefetcher.transform.transforms] == [Normalize]
    images, labels = next(iter(loader))
    assert images.shape == (8, 3, CROP, CROP) and images.dtype == torch.float32 and torch.isfinite(images).all()

    def run(num_workers):
        torch.manual_seed(0)
        dataset = create_dataset("", root=pack, split="train", **_dataset_kwargs(True))
        kwargs = dict(_loader_kwargs(True, num_workers=num_workers), auto_augment="rand-m9-mstd0.5-inc1")
        return [(images.clone(), labels.clone()) for images, labels in create_loader(dataset, **kwargs)]

    one, two = run(0), run(2)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(one, two, strict=False))


@pytest.mark.cuda
def test_auto_augment_runs_batched_on_a_cuda_device(pack):
    """train.py's --aa rand-m9-mstd0.5-inc1 --reprob 0.25 on its default device, CUDA: the workers only crop, the
    recipe runs batched in the prefetcher on the device (pinned batches, side stream), and a step trains on it."""
    from fastdata import gpu_transforms as G
    from fastdata import transforms as T

    dataset = create_dataset("", root=pack, split="train", **_dataset_kwargs(True))
    kwargs = dict(_loader_kwargs(True), auto_augment="rand-m9-mstd0.5-inc1", device=torch.device("cuda"))
    loader = create_loader(dataset, **dict(kwargs, pin_memory=True))
    assert isinstance(loader.dataset.transform, T.RandomResizedCrop)
    assert [type(t) for t in loader.prefetcher.transform.transforms] == [
        G.RandomHorizontalFlip,
        G.TimmRandAugment,
        G.Normalize,
        G.RandomErasing,
    ]
    model = tiny_model().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for images, labels in loader:
        assert images.is_cuda and labels.is_cuda and images.shape == (8, 3, CROP, CROP)
        assert images.dtype == torch.float32 and torch.isfinite(images).all()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert torch.isfinite(loss)


def test_augment_at_picks_where_the_recipe_runs(pack):
    from fastdata import gpu_transforms as G
    from fastdata import transforms as T

    dataset = create_dataset("", root=pack, split="train", **_dataset_kwargs(True))
    device = create_loader(
        dataset, **dict(_loader_kwargs(True), auto_augment="rand-m9-mstd0.5-inc1", augment_at="device")
    )
    assert isinstance(device.dataset.transform, T.RandomResizedCrop)
    assert [type(t) for t in device.prefetcher.transform.transforms] == [
        G.RandomHorizontalFlip,
        G.TimmRandAugment,
        G.Normalize,
        G.RandomErasing,
    ]
    three = create_loader(dataset, **dict(_loader_kwargs(True), auto_augment="3a"))  # jitter kept, as timm
    assert [type(t) for t in three.dataset.transform.augments] == [
        T.RandomHorizontalFlip,
        T.ThreeAugment,
        T.ColorJitter,
        T.RandomErasing,
    ]
    plain = create_loader(dataset, **dict(_loader_kwargs(True), augment_at="decode"))
    assert [type(t) for t in plain.dataset.transform.augments] == [
        T.RandomHorizontalFlip,
        T.ColorJitter,
        T.RandomErasing,
    ]


def test_create_dataset_says_what_is_wrong(pack, tmp_path):
    with pytest.raises(ValueError, match="--dataset ''"):
        create_dataset("torch/cifar10", root=pack, split="train")
    with pytest.raises(ValueError, match="fastdata pack"):
        create_dataset("", root=tmp_path, split="train")
    with pytest.raises(ValueError, match="--class-map"):
        create_dataset("", root=pack, split="train", class_map="classes.txt")


def test_timms_own_defaults_are_accepted(pack):
    """Every argument of the installed timm's create_loader, at its default, is accepted (no refusal)."""
    from timm.data import create_loader as timm_create_loader

    import tests.torchvision_shim  # noqa: F401 - timm imports torchvision

    defaults = {
        name: p.default
        for name, p in inspect.signature(timm_create_loader).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    defaults.update(device=torch.device("cpu"), num_workers=0)
    loader = create_loader(create_dataset("", root=pack, split="train"), input_size=CROP, batch_size=4, **defaults)
    images, _ = next(iter(loader))
    assert images.shape == (4, 3, CROP, CROP)


def test_the_tool_adds_the_import_after_timms(tmp_path):
    spec = importlib.util.spec_from_file_location("timm_train", Path(__file__).parents[2] / "tools" / "timm_train.py")
    tool = importlib.util.module_from_spec(spec)
    sys.modules["timm_train"] = tool
    spec.loader.exec_module(tool)
    source = (
        "import torch\nfrom timm.data import create_dataset, create_loader, \\\n    Mixup\n"
        "from timm.models import create_model\n\ndef main():\n    return create_loader\n"
    )
    patched = tool.patch(source)
    lines = patched.splitlines()
    assert lines[3] == tool.IMPORT_LINE and lines[4] == "from timm.models import create_model"
    compile(patched, "train.py", "exec")  # still valid Python
    names = [n.module for n in ast.parse(patched).body if isinstance(n, ast.ImportFrom)]
    assert names == ["timm.data", "fastdata.integrations.timm", "timm.models"]  # so the later import wins
    with pytest.raises(ValueError, match="train.py"):
        tool.patch("import torch\n")
