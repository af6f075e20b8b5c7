"""The Accelerate recipe that keeps DataLoaderX (examples/tutorial_accelerate.py), run by test_accelerate.py as
``torchrun --nproc_per_node 2 tests/trainers/accelerate_recipe.py PACK OUT MODE [STOP_AT]`` (Accelerate
runs on 2 CPU processes with gloo; its own ``accelerate launch --cpu`` needs MPI for more than one).

The batches are flipped by a seeded ``RandomHorizontalFlip`` on the way to the device. MODE ``full`` trains EPOCHS
passes; ``first`` stops after STOP_AT steps with ``save_state``; ``resume`` continues
from that state. Each rank writes the digests of the batches it trained on.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate import Accelerator

import fastdata
import tests.torchvision_shim  # noqa: F401 - before lightning/accelerate import torchvision (see the module)
from fastdata import gpu_transforms as T
from fastdata.transforms import RandomResizedCrop
from tests.trainers.common import CROP, EPOCHS, digest, tiny_model, write_seen


def main(pack: str, out: str, mode: str, stop_at: int = 0) -> None:
    out = Path(out)
    accelerator = Accelerator(cpu=True)
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)  # the model and optimizer only, not the loader
    dataset = fastdata.ShardDataset(pack, transform=RandomResizedCrop(CROP))
    sampler = fastdata.DistributedSampler(
        dataset, num_replicas=accelerator.num_processes, rank=accelerator.process_index, seed=3
    )
    loader = fastdata.DataLoaderX(
        dataset, batch_size=2, sampler=sampler, num_workers=1, collate_fn=fastdata.fast_collate
    )
    # The flip's generator goes into save_state() with the loader's state. Accelerate saves a registered object from
    # the main process only and loads that on every rank, so every rank seeds it alike (as all loader states are).
    flip = T.RandomHorizontalFlip(generator=torch.Generator().manual_seed(5))
    batches = fastdata.DataPrefetcher(
        loader, device=accelerator.device, transform=T.Compose([flip, T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)])
    )
    accelerator.register_for_checkpointing(batches)
    progress = {"epoch": 0, "step": 0}
    if mode == "resume":
        accelerator.load_state(str(out / "state"))
        progress = json.loads((out / "progress.json").read_text())
    seen, step = [], progress["step"]
    for epoch in range(progress["epoch"], EPOCHS):
        sampler.set_epoch(epoch)
        for images, labels in batches:
            seen.append(digest(images, labels))
            loss = F.cross_entropy(model(images), labels)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if mode == "first" and step == stop_at:
                accelerator.save_state(str(out / "state"))
                if accelerator.is_main_process:
                    (out / "progress.json").write_text(json.dumps({"epoch": epoch, "step": step}))
                write_seen(out, mode, accelerator.process_index, seen)
                accelerator.wait_for_everyone()
                return
    write_seen(out, mode, accelerator.process_index, seen)
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], *(int(a) for a in sys.argv[4:]))
