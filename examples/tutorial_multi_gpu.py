"""
Train on several GPUs with DistributedSampler
=============================================

In a distributed job every rank (one process per GPU) reads its own part of each pass.
:class:`fastdata.DistributedSampler` is torch's ``DistributedSampler`` (the same indices by default) with what
long runs need besides: ``ratio`` passes per ``iter()``, so iteration-based training never restarts its workers;
``shuffle="blocks"``, so that all ranks read a few shards at a time (what a node-local cache of a remote dataset
likes); repeated augmentation (``repeats``); and an exact mid-pass resume, also on another number of ranks.

Here two ranks train with ``DistributedDataParallel`` over the ``gloo`` backend on the CPU, started by
:mod:`torch.multiprocessing`. On GPUs the job is launched by ``torchrun --nproc_per_node=8 train.py``, each rank
runs what ``train_rank`` does with ``"nccl"`` and ``torch.cuda.set_device(local_rank)``, and its batches go through
:class:`fastdata.DataPrefetcher` (see the GPU prefetcher tutorial).
"""

# %%
# Pack some images
# ----------------
# Three classes of 100 small generated JPEGs, in shards of 25 samples (12 shards, so that ``shuffle="blocks"`` has
# blocks to order).
import os
import shutil
import socket
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from sample_images import make_images

import fastdata
from fastdata.transforms import RandomResizedCrop

WORK = Path(tempfile.mkdtemp(prefix="fastdata-tutorial-"))


make_images(WORK / "images")
# shuffle_seed pre-shuffles the samples, so that a block of shards holds every class, not one class's images.
manifest = fastdata.pack(
    WORK / "images", WORK / "shards", format="tfrecord", samples_per_shard=25, shuffle_seed=0, progress=False
)

# %%
# What each rank runs
# -------------------
# The sampler takes its rank and the number of ranks from the initialized process group. ``set_epoch`` gives every
# epoch its own order, the same on all ranks, so that together they cover the pass once. Each rank records the
# sample indices it trained on, and rank 0 gathers them.
WORLD = 2


def train_rank(rank: int, port: int, shards: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)  # "nccl" on GPUs
    torch.set_num_threads(1)
    try:
        dataset = fastdata.ShardDataset(shards, transform=RandomResizedCrop(64))
        sampler = fastdata.DistributedSampler(dataset, shuffle="blocks", seed=0, block_shards=4)
        loader = fastdata.DataLoaderX(
            dataset,
            batch_size=25,
            sampler=sampler,
            num_workers=1,
            persistent_workers=True,
            collate_fn=fastdata.NormalizeCollate(hflip_p=0.5),
        )
        torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
        model = torch.nn.parallel.DistributedDataParallel(
            torch.nn.Sequential(
                torch.nn.Conv2d(3, 16, 3, stride=2),
                torch.nn.ReLU(),
                torch.nn.AdaptiveAvgPool2d(1),
                torch.nn.Flatten(),
                torch.nn.Linear(16, len(dataset.classes)),
            )
        )
        optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
        report = []
        for epoch in range(2):
            sampler.set_epoch(epoch)
            indices = list(sampler)  # what the loader will read this epoch, in order
            losses = []
            for images, labels in loader:
                loss = torch.nn.functional.cross_entropy(model(images), labels)
                optimizer.zero_grad()
                loss.backward()  # DDP averages the gradients over the ranks here
                optimizer.step()
                losses.append(loss.item())
            # the shards (0..11) of the first 50 samples of the epoch: one block of 4 shards, not all 12
            shards = sorted({int(np.searchsorted(dataset.shard_offsets, i, side="right")) - 1 for i in indices[:50]})
            report.append({"epoch": epoch, "indices": indices, "loss": float(np.mean(losses)), "shards": shards})
        gathered = [None] * WORLD
        dist.all_gather_object(gathered, report)
        if rank == 0:
            torch.save(gathered, out)
    finally:
        dist.destroy_process_group()


# %%
# Start two ranks
# ---------------
# ``torch.multiprocessing.start_processes`` starts the ranks and waits for them; ``fork`` lets it run the function
# defined in this script from anywhere (a notebook, or the documentation build); ``spawn`` works too when the
# script is run as ``python tutorial_multi_gpu.py``. The ranks' output goes to a file that this process reads.
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
out = WORK / "report.pt"
mp.start_processes(train_rank, args=(port, str(WORK / "shards"), str(out)), nprocs=WORLD, start_method="fork")

reports = torch.load(out)
for epoch in range(2):
    per_rank = [reports[rank][epoch]["indices"] for rank in range(WORLD)]
    print(
        f"epoch {epoch}: rank 0 read {len(per_rank[0])} samples, rank 1 read {len(per_rank[1])}; "
        f"overlap {len(set(per_rank[0]) & set(per_rank[1]))}, together {len(set(per_rank[0]) | set(per_rank[1]))} "
        f"of 300; loss on rank 0 {reports[0][epoch]['loss']:.3f}, rank 1 {reports[1][epoch]['loss']:.3f}"
    )
    print(f"         the shards of rank 0's first 50 samples: {reports[0][epoch]['shards']}")
print("epochs in a different order:", reports[0][0]["indices"] != reports[0][1]["indices"])
shutil.rmtree(WORK)

# %%
# Resuming, and iteration-based schedules
# ---------------------------------------
# Each rank saves ``loader.state_dict()`` with its checkpoint; ``loader.load_state_dict(...)`` continues with the
# very next batch, and a checkpoint taken on 8 ranks resumes on 4. With ``DistributedSampler(..., ratio=100)``
# one ``iter()`` covers 100 reshuffled passes, so a run counted in iterations keeps one set of workers throughout.
