"""
Train with Hugging Face Accelerate
==================================

``accelerator.prepare()`` rebuilds every ``DataLoader`` it is given as its own loader over a plain torch
``DataLoader``, which would drop what :class:`fastdata.DataLoaderX` adds. So give ``prepare()`` the model and the
optimizer only, shard the data with a :class:`fastdata.DistributedSampler` built from the accelerator's rank and
number of processes, move the batches with :class:`fastdata.DataPrefetcher` to ``accelerator.device``, and register
the prefetcher for checkpointing: ``accelerator.save_state()`` then saves the loader's position (and the state of
the transform's generators), and ``load_state()`` resumes with the very next batch.

This script runs as one CPU process. ``accelerate launch --num_processes 8 script.py`` (or ``torchrun``) runs the
same code on 8 GPUs, each process with its part of the data.
"""

# %%
# Pack some images
# ----------------
import hashlib
import shutil
import tempfile
import warnings
from pathlib import Path

import torch
from accelerate import Accelerator
from sample_images import make_images

import fastdata
from fastdata import gpu_transforms as T
from fastdata.transforms import RandomResizedCrop

WORK = Path(tempfile.mkdtemp(prefix="fastdata-tutorial-"))


make_images(WORK / "images")
manifest = fastdata.pack(WORK / "images", WORK / "shards", format="tfrecord", progress=False)

# %%
# The recipe
# ----------
# The flip draws from a seeded generator that goes into ``save_state()``. Accelerate saves a registered object from
# the main process only and loads that state on every rank; every rank's loader state is the same, so seed the
# transform's generators alike on every rank too.


def setup():
    """A fresh run: what a training script builds at its start."""
    accelerator = Accelerator(cpu=True)  # on a GPU machine: Accelerator(), started by `accelerate launch`
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, stride=2),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 3),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    model, optimizer = accelerator.prepare(model, optimizer)  # the model and the optimizer, not the loader
    train = fastdata.ShardDataset(WORK / "shards", transform=RandomResizedCrop(64))
    sampler = fastdata.DistributedSampler(
        train, num_replicas=accelerator.num_processes, rank=accelerator.process_index, seed=0
    )
    loader = fastdata.DataLoaderX(
        train, batch_size=30, sampler=sampler, num_workers=2, collate_fn=fastdata.fast_collate, drop_last=True
    )
    flip = T.RandomHorizontalFlip(generator=torch.Generator().manual_seed(0))
    batches = fastdata.DataPrefetcher(
        loader, device=accelerator.device, transform=T.Compose([flip, T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)])
    )
    accelerator.register_for_checkpointing(batches)  # save_state() / load_state() now include the data position
    return accelerator, model, optimizer, sampler, batches


def train(accelerator, model, optimizer, sampler, batches, epochs, start_epoch=0, stop_after=None) -> list[str]:
    """Train; return a digest of every batch seen (flips included). Save the state after ``stop_after`` steps."""
    seen = []
    for epoch in range(start_epoch, epochs):
        sampler.set_epoch(epoch)
        for images, labels in batches:
            seen.append(hashlib.sha1(images.cpu().numpy().tobytes()).hexdigest()[:8])
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            if len(seen) == stop_after:
                accelerator.save_state(WORK / "state")
                return seen
    return seen


# %%
# Train, stop in the middle of an epoch, resume
# ---------------------------------------------
run = setup()
print(f"{run[0].num_processes} process(es), device {run[0].device}")
full = train(*run, epochs=1)
print(f"uninterrupted: {len(full)} batches")

first = train(*setup(), epochs=1, stop_after=4)  # "interrupted" after 4 batches
run = setup()
run[0].load_state(WORK / "state")
rest = train(*run, epochs=1)  # a real script also saves the epoch it was in
print("resumed: the batches of the uninterrupted run, flips included:", first + rest == full)

# %%
# A DataLoaderX given to prepare() anyway
# ---------------------------------------
# ``prepare()`` warns at once. A ``DataLoaderX`` whose sampler already shards the data is kept as it is (its batches
# stay on the CPU: wrap it in ``DataPrefetcher``); any other is replaced, and the warning gives this recipe.
loader = fastdata.DataLoaderX(fastdata.ShardDataset(WORK / "shards"), batch_size=30)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    run[0].prepare(loader)
print("\n".join(str(w.message) for w in caught if "fastdata" in str(w.message) or "DataLoaderX" in str(w.message)))
shutil.rmtree(WORK)
