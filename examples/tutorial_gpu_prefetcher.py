"""
Train with the GPU prefetcher
=============================

With a GPU the work is split in two. The DataLoader workers only decode each crop into a uint8 batch
(:func:`fastdata.fast_collate`: ``[N, 3, H, W]``, a quarter of a float batch's bytes), and
:class:`fastdata.DataPrefetcher` copies the next batch to the GPU on a side CUDA stream while the model trains on the
current one, then runs the batch augmentations of :mod:`fastdata.gpu_transforms` there: flip, colour jitter,
normalization, Mixup/CutMix, each image with its own random draw.

This page runs on the CPU, where ``DataPrefetcher`` runs the same code without streams and gives the same batches.
On a machine with CUDA, nothing in the script changes: the prefetcher picks ``device="cuda"``, ``DataLoaderX``
pins its batches (``pin_memory`` defaults to ``torch.cuda.is_available()``), the copy is ``non_blocking`` on the
side stream, and the transforms run as CUDA kernels. The model must then be on the GPU too (``model.cuda()``).
"""

# %%
# Pack some images
# ----------------
# Three classes of 100 small generated JPEGs, packed into TFRecord shards (see the CPU tutorial for each step).
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from sample_images import make_images

import fastdata
from fastdata import gpu_transforms as T
from fastdata.transforms import RandomResizedCrop

WORK = Path(tempfile.mkdtemp(prefix="fastdata-tutorial-"))


make_images(WORK / "images")
manifest = fastdata.pack(WORK / "images", WORK / "shards", format="tfrecord", progress=False)

# %%
# uint8 batches from the workers
# ------------------------------
# :func:`fastdata.fast_collate` hands the batch on as the workers decoded it: uint8, ``[N, 3, H, W]`` (stored
# ``channels_last``), with int64 labels. The crop is decoded straight into its slot of the batch.
train = fastdata.ShardDataset(WORK / "shards", transform=RandomResizedCrop(64))
loader = fastdata.DataLoaderX(
    train, batch_size=32, shuffle=True, num_workers=2, collate_fn=fastdata.fast_collate, drop_last=True
)
images, labels = next(iter(loader))
print("from the workers:", tuple(images.shape), images.dtype, tuple(labels.shape), labels.dtype)

# %%
# Augment and normalize on the device
# -----------------------------------
# The batch transform is called as ``images, labels = transform(images, labels)`` on the device. Its random draws
# come from a seeded CPU :class:`torch.Generator` (so nothing waits on the GPU, and a seed gives the same batches).
# :class:`~fastdata.gpu_transforms.Normalize` takes the uint8 batch and folds the division by 255 in;
# :class:`~fastdata.gpu_transforms.MixupCutmix` mixes pairs of images and turns the labels into soft targets.
g = torch.Generator().manual_seed(0)
augment = T.Compose(
    [
        T.RandomHorizontalFlip(generator=g),
        T.ColorJitter(0.4, 0.4, 0.4, generator=g),
        T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD),
        T.MixupCutmix(0.8, 1.0, label_smoothing=0.1, num_classes=len(train.classes), generator=g),
    ]
)
prefetcher = fastdata.DataPrefetcher(loader, transform=augment, channels_last=True)
print("the prefetcher's device:", prefetcher.device)  # cuda where there is one

# %%
# Train
# -----
# The loop reads the prefetcher instead of the loader. With Mixup the labels are soft: ``[N, classes]`` float
# targets, which :func:`torch.nn.functional.cross_entropy` accepts as probabilities.
device = prefetcher.device
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 3, stride=2),
    torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1),
    torch.nn.Flatten(),
    torch.nn.Linear(16, len(train.classes)),
).to(device, memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
for epoch in range(2):
    losses = []
    for images, targets in prefetcher:  # one pass; iterate again for the next epoch
        loss = torch.nn.functional.cross_entropy(model(images), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(
        f"epoch {epoch}: images {tuple(images.shape)} {images.dtype} on {images.device}, "
        f"targets {tuple(targets.shape)} {targets.dtype}, loss {np.mean(losses):.3f}"
    )

# %%
# Mixed precision, and resuming
# -----------------------------
# ``dtype=torch.bfloat16`` (or ``float16``) hands the images out in that type, for training under
# :func:`torch.autocast`. ``prefetcher.state_dict()`` is the loader's state without the batch the prefetcher read
# ahead, plus the state of every generator its transform holds: saved with the model, it resumes the same
# augmented batches.
half = fastdata.DataPrefetcher(loader, transform=T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD), dtype=torch.bfloat16)
images, labels = next(iter(half))
print("bfloat16 batch:", images.dtype, tuple(images.shape))
print("what a checkpoint keeps:", sorted(prefetcher.state_dict()))
shutil.rmtree(WORK)
