"""
Train with timm's train.py
==========================

timm's ``train.py`` builds its data with ``timm.data.create_dataset`` and ``timm.data.create_loader``.
:mod:`fastdata.integrations.timm` has both, with the same arguments, so one line added to ``train.py`` after its
``from timm.data import ...`` switches it to a fastdata pack::

    from fastdata.integrations.timm import create_dataset, create_loader

Pack each split (``fastdata pack FOLDER DATA/train``, ``fastdata pack FOLDER DATA/validation``) and run
``python train.py DATA --model resnet50 ...`` as before. This page calls the two functions as ``train.py`` does and
trains a timm model on what they return, on the CPU. A flag whose recipe fastdata does not reproduce (aug splits,
Mixup in the collate, ...) is refused with an error naming it, rather than trained differently.
"""

# %%
# Pack a train and a validation split
# -----------------------------------
import shutil
import tempfile
from pathlib import Path

import numpy as np
import timm
import torch
from sample_images import make_images

import fastdata
from fastdata.integrations.timm import create_dataset, create_loader

WORK = Path(tempfile.mkdtemp(prefix="fastdata-tutorial-"))
DATA = WORK / "data"


make_images(WORK / "train-images", per_class=60, seed=0)
make_images(WORK / "validation-images", per_class=20, seed=1)
for split in ("train", "validation"):
    fastdata.pack(WORK / f"{split}-images", DATA / split, format="tfrecord", progress=False)

# %%
# The calls train.py makes
# ------------------------
# ``create_dataset`` opens ``DATA/<split>``; ``create_loader`` returns a ``DataLoaderX`` (a decode-time
# ``RandomResizedCrop`` for training, a ``ResizeCenterCrop`` by ``crop_pct`` for evaluation) behind a
# :class:`fastdata.DataPrefetcher` that hands out normalized batches on ``device`` in ``img_dtype``, as timm's
# prefetcher does. The arguments are the ones ``train.py`` passes (most left at its defaults here).
device = torch.device("cpu")  # train.py: the training device
model = timm.create_model("test_resnet", num_classes=3)
config = timm.data.resolve_data_config({"input_size": (3, 64, 64)}, model=model)
dataset_train = create_dataset("", root=DATA, split="train", is_training=True, batch_size=32, seed=42)
dataset_eval = create_dataset("", root=DATA, split="validation", is_training=False, batch_size=32)
loader_train = create_loader(
    dataset_train,
    input_size=config["input_size"],
    batch_size=32,
    is_training=True,
    re_prob=0.25,  # --reprob: random erasing
    hflip=0.5,
    color_jitter=0.4,
    interpolation="random",  # --train-interpolation, as train.py passes it
    mean=config["mean"],
    std=config["std"],
    num_workers=2,
    device=device,
    img_dtype=torch.float32,
)
loader_eval = create_loader(
    dataset_eval,
    input_size=config["input_size"],
    batch_size=64,
    is_training=False,
    interpolation=config["interpolation"],
    mean=config["mean"],
    std=config["std"],
    num_workers=2,
    crop_pct=config["crop_pct"],
    device=device,
)
print("training transform in the workers:", loader_train.dataset.transform)
print("on the device:", loader_train.prefetcher.transform)

# %%
# Train and validate
# ------------------
# What ``train.py``'s loops do with them, shortened: two epochs, then top-1 accuracy on the validation split.
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for epoch in range(2):
    model.train()
    losses = []
    for images, labels in loader_train:
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(f"epoch {epoch}: {len(losses)} batches of {tuple(images.shape)}, loss {np.mean(losses):.3f}")
model.eval()
with torch.no_grad():
    correct = sum(int((model(images).argmax(1) == labels).sum()) for images, labels in loader_eval)
print(f"validation top-1: {correct / len(dataset_eval):.0%} of {len(dataset_eval)}")

# %%
# RandAugment (``--aa``), and what is refused
# -------------------------------------------
# ``--aa rand-m9-mstd0.5-inc1`` runs too. Without a CUDA device (or with ``augment_at="decode"``) the whole recipe
# (flip, timm's RandAugment, random erasing) runs in the workers on the uint8 crop and the device only normalizes;
# with one, it runs batched on the GPU. ``interpolation`` is that of the policy's geometric ops: ``"random"``
# (bilinear or bicubic per op) is what ``train.py`` passes by default, ``timm.data.create_transform`` uses
# ``"bilinear"``.
loader_aa = create_loader(
    dataset_train,
    input_size=config["input_size"],
    batch_size=32,
    is_training=True,
    auto_augment="rand-m9-mstd0.5-inc1",
    re_prob=0.25,
    interpolation="random",
    mean=config["mean"],
    std=config["std"],
    num_workers=2,
    device=device,
)
print("with --aa, in the workers:", [type(t).__name__ for t in loader_aa.dataset.transform.transforms])
images, labels = next(iter(loader_aa))
print("a batch:", tuple(images.shape), images.dtype)
try:
    create_loader(dataset_train, input_size=config["input_size"], batch_size=32, is_training=True, num_aug_splits=3)
except ValueError as error:
    print("refused:", error)
shutil.rmtree(WORK)
