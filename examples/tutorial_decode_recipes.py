"""
Augmentation recipes at decode time
===================================

Most recipes that train with RandAugment do it as timm's ``train.py`` does: PIL operations on each image in the
DataLoader workers, after the crop. :mod:`fastdata.transforms` runs the same recipes in the workers on the uint8
crop, in place in its slot of the batch, right after the crop is decoded there:
:class:`~fastdata.transforms.DecodeCompose` chains the decode-time crop with
:class:`~fastdata.transforms.RandomHorizontalFlip`, timm's RandAugment
(:meth:`RandAugment.from_config <fastdata.transforms.RandAugment.from_config>`) and timm's
:class:`~fastdata.transforms.RandomErasing`, and :class:`fastdata.NormalizeCollate` turns the batch into normalized
float32 for a CPU training loop (or :func:`fastdata.fast_collate` and a :class:`fastdata.DataPrefetcher` normalize
on the GPU).

The crop and every augmentation draw from the sample's own generator, so the pixels do not depend on the number of
workers, and a resumed run gives exactly those of an uninterrupted one.
"""

# %%
# Pack some images
# ----------------
import shutil
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from sample_images import make_images

import fastdata
from fastdata.transforms import (
    DecodeCompose,
    RandAugment,
    RandomErasing,
    RandomHorizontalFlip,
    RandomResizedCrop,
    ThreeAugment,
)

WORK = Path(tempfile.mkdtemp(prefix="fastdata-tutorial-"))


make_images(WORK / "images")
manifest = fastdata.pack(WORK / "images", WORK / "shards", format="tfrecord", progress=False)

# %%
# timm's recipe: RandAugment and RandomErasing
# --------------------------------------------
# ``rand-m9-mstd0.5-inc1`` is timm's config string (2 ops, magnitude 9 with noise 0.5, the increasing ops).
# timm's policy takes two settings from the crop it runs on, passed here as ``timm.data.create_transform`` passes
# them: ``translate_const``, 45% of the crop's side (100 for 224), and ``interpolation``, that of the geometric ops:
# ``"bilinear"``, ``create_transform``'s default. (timm's ``train.py`` passes ``--train-interpolation``, whose
# default ``"random"`` picks bilinear or bicubic per op: write ``interpolation="random"`` to reproduce that run
# instead.) The fill of rotated and sheared corners is the ImageNet mean colour, as timm's. ``RandomErasing`` draws
# its boxes as timm's does on the normalized tensor; its values are the uint8 ones that the later normalization
# turns into timm's (here ``mode="pixel"``: normal noise per pixel).
SIZE = 64
recipe = DecodeCompose(
    [
        RandomResizedCrop(SIZE),
        RandomHorizontalFlip(),
        RandAugment.from_config("rand-m9-mstd0.5-inc1", interpolation="bilinear", translate_const=int(SIZE * 0.45)),
        RandomErasing(0.25, mode="pixel"),
    ]
)
train = fastdata.ShardDataset(WORK / "shards", transform=recipe)
print(recipe)

# %%
# What the workers hand out
# -------------------------
# ``ds[i]`` gives the augmented uint8 crop; a batch is decoded and augmented in place, slot by slot. Here are the
# first 8 images of two passes over the same samples: each pass draws new crops and new operations.
fig, axes = plt.subplots(2, 8, figsize=(12, 3.4))
for row, seed in enumerate((0, 1)):
    torch.manual_seed(seed)  # a plain int index draws from torch's RNG; DataLoaderX keys each sample's draws
    for col in range(8):
        image, label = train[col * 37]
        axes[row, col].imshow(image)
        axes[row, col].set_axis_off()
        axes[row, col].set_title(train.classes[label], fontsize=8)
fig.suptitle("RandomResizedCrop + flip + rand-m9-mstd0.5-inc1 + RandomErasing(0.25), decoded in the workers")
fig.tight_layout()
plt.show()

# %%
# Train on the CPU
# ----------------
# :class:`fastdata.NormalizeCollate` makes the normalized float32 batch in the workers (the flip is already in the
# recipe). The pixels are the same with 0 or 2 workers: compare the first batch of a seeded pass.


def first_batch(num_workers: int) -> torch.Tensor:
    loader = fastdata.DataLoaderX(
        train,
        batch_size=50,
        shuffle=True,
        num_workers=num_workers,
        collate_fn=fastdata.NormalizeCollate(),
        generator=torch.Generator().manual_seed(0),
    )
    return next(iter(loader))[0]


print("the same pixels with 0 and 2 workers:", torch.equal(first_batch(0), first_batch(2)))

loader = fastdata.DataLoaderX(train, batch_size=50, shuffle=True, num_workers=2, collate_fn=fastdata.NormalizeCollate())
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 3, stride=2),
    torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1),
    torch.nn.Flatten(),
    torch.nn.Linear(16, len(train.classes)),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
for epoch in range(2):
    losses = []
    for images, labels in loader:
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(f"epoch {epoch}: {len(losses)} batches of {tuple(images.shape)} {images.dtype}, loss {np.mean(losses):.3f}")

# %%
# Other policies
# --------------
# torchvision's ``RandAugment(2, 9)``, ``TrivialAugmentWide()`` and ``AutoAugment("imagenet")``, DeiT III's
# ``ThreeAugment(0.3)`` and ``ColorJitter`` are decode-time augmentations too, used the same way. The same recipes
# run batched on the GPU with :mod:`fastdata.gpu_transforms` (see the GPU prefetcher tutorial).
deit3 = DecodeCompose([RandomResizedCrop(SIZE), RandomHorizontalFlip(), ThreeAugment(0.3)])
image, label = fastdata.ShardDataset(WORK / "shards", transform=deit3)[0]
print("3-Augment:", image.shape, image.dtype)
shutil.rmtree(WORK)
