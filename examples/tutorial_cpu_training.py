"""
Pack an image folder and train on the CPU
=========================================

The whole path on a machine without a GPU: an image folder (as torchvision's ``ImageFolder`` reads it) is packed
once into checked TFRecord shards, read back by :class:`fastdata.ShardDataset` with a decode-time
:class:`fastdata.transforms.RandomResizedCrop` (only the crop's region of each JPEG is decoded), and batched by
:class:`fastdata.DataLoaderX`, whose workers also flip and normalize the batch
(:class:`fastdata.NormalizeCollate`), so the training loop receives float32 batches ready for the model.

It runs in seconds on 300 generated images; point ``IMAGES`` at your own folder to train on it.
"""

# %%
# Some images to train on
# -----------------------
# Three classes of 100 small JPEGs each, 96 to 160 pixels a side; the class decides which colour dominates, so a
# tiny model can learn it in a few steps.
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from sample_images import make_images

import fastdata
from fastdata.transforms import RandomResizedCrop, ResizeCenterCrop

WORK = Path(tempfile.mkdtemp(prefix="fastdata-tutorial-"))
IMAGES = WORK / "images"


make_images(IMAGES)
print(sorted(p.name for p in IMAGES.iterdir()), sum(1 for _ in IMAGES.rglob("*.jpg")), "images")

# %%
# Pack the folder
# ---------------
# :func:`fastdata.pack` is ``fastdata pack IMAGES SHARDS --format tfrecord`` from Python. Every image is decoded
# once to check it (a bad file is skipped and listed in the manifest), JPEGs are re-coded losslessly with restart
# intervals (the same pixels, faster crops), and ``manifest.json`` is written last. :func:`fastdata.verify` reads
# every record back: CRCs, index files, and that each image decodes.
SHARDS = WORK / "shards"
manifest = fastdata.pack(IMAGES, SHARDS, format="tfrecord", progress=False)
print(f"{manifest.num_samples} samples, classes {manifest.classes}, {len(manifest.shards)} shard(s)")
print(fastdata.verify(SHARDS))

# %%
# Read it
# -------
# ``ds[i]`` is ``(image, label)``: the decoded crop as an RGB uint8 array, height x width x 3. The crop is drawn as
# torchvision's ``RandomResizedCrop`` draws it, from the size in the JPEG header, and only that region is decoded.
train = fastdata.ShardDataset(SHARDS, transform=RandomResizedCrop(64))
image, label = train[0]
print(len(train), train.classes, image.shape, image.dtype, label)

# %%
# Train
# -----
# On the CPU, :class:`fastdata.NormalizeCollate` makes the flipped, normalized float32 batch in the workers, in one
# pass, so the training loop only runs the model. ``persistent_workers=True`` keeps the workers across epochs.
loader = fastdata.DataLoaderX(
    train,
    batch_size=32,
    shuffle=True,
    num_workers=2,
    persistent_workers=True,
    collate_fn=fastdata.NormalizeCollate(hflip_p=0.5),
    drop_last=True,
)
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 3, stride=2),
    torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1),
    torch.nn.Flatten(),
    torch.nn.Linear(16, len(train.classes)),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
for epoch in range(3):
    losses = []
    for images, labels in loader:  # float32 [32, 3, 64, 64], int64 [32]
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(f"epoch {epoch}: {len(losses)} batches of {tuple(images.shape)} {images.dtype}, loss {np.mean(losses):.3f}")

# %%
# Evaluate
# --------
# For evaluation, :class:`fastdata.transforms.ResizeCenterCrop` resizes the shorter side and takes the centre crop
# (torchvision's ``Resize(73)`` + ``CenterCrop(64)``), again decoding only what it keeps.
evaluation = fastdata.ShardDataset(SHARDS, transform=ResizeCenterCrop(73, 64))
eval_loader = fastdata.DataLoaderX(evaluation, batch_size=100, num_workers=2, collate_fn=fastdata.NormalizeCollate())
model.eval()
with torch.no_grad():
    correct = sum(int((model(images).argmax(1) == labels).sum()) for images, labels in eval_loader)
print(f"accuracy on the {len(evaluation)} training images: {correct / len(evaluation):.0%}")

# %%
# Resume in the middle of an epoch
# --------------------------------
# ``loader.state_dict()``, saved with the model, resumes exactly: a new loader given it with
# ``load_state_dict`` yields the very batches the interrupted one would have yielded next.
torch.manual_seed(1)
replay = fastdata.DataLoaderX(train, batch_size=32, shuffle=True, collate_fn=fastdata.NormalizeCollate())
batches = iter(replay)
next(batches)
state = replay.state_dict()  # after one batch of the pass
expected, _ = next(batches)
resumed = fastdata.DataLoaderX(train, batch_size=32, shuffle=True, collate_fn=fastdata.NormalizeCollate())
resumed.load_state_dict(state)
images, _ = next(iter(resumed))
print("the resumed loader's next batch is the same, crops included:", torch.equal(images, expected))
shutil.rmtree(WORK)  # the generated images and shards
