"""Lightning ``fit`` with DataLoaderX + fastdata.DistributedSampler on 2 CPU ranks (``ddp``, gloo), run by
test_lightning.py as ``python tests/trainers/lightning_fit.py PACK OUT MODE [CKPT_EVERY]``.

MODE ``full`` trains EPOCHS passes and saves a checkpoint every CKPT_EVERY steps (mid-epoch ones included);
``resume`` fits again from ``OUT/resume.ckpt``. Each rank writes the digests of the batches it trained on.
"""

from __future__ import annotations

import sys
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint

import fastdata
import tests.torchvision_shim  # noqa: F401 - before lightning/accelerate import torchvision (see the module)
from fastdata.transforms import RandomResizedCrop
from tests.trainers.common import CROP, EPOCHS, digest, tiny_model, write_seen


class Tiny(L.LightningModule):
    def __init__(self, pack: str, out: Path, mode: str) -> None:
        super().__init__()
        self.model, self.pack, self.out, self.mode, self.seen = tiny_model(), pack, out, mode, []

    def train_dataloader(self) -> fastdata.DataLoaderX:
        dataset = fastdata.ShardDataset(self.pack, transform=RandomResizedCrop(CROP))
        sampler = fastdata.DistributedSampler(dataset, seed=3)  # rank and world from the process group
        return fastdata.DataLoaderX(
            dataset, batch_size=2, sampler=sampler, num_workers=1, collate_fn=fastdata.fast_collate
        )

    def on_train_epoch_start(self) -> None:
        self.trainer.train_dataloader.sampler.set_epoch(self.current_epoch)

    def training_step(self, batch, _):
        images, labels = batch
        self.seen.append(digest(images, labels))
        return F.cross_entropy(self.model(images.float() / 255), labels)

    def on_train_end(self) -> None:
        write_seen(self.out, self.mode, self.global_rank, self.seen)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(pack: str, out: str, mode: str, every: int = 0) -> None:
    out = Path(out)
    callbacks = (
        [ModelCheckpoint(dirpath=out / "ckpt", every_n_train_steps=every, save_top_k=-1, filename="{step}")]
        if every
        else []
    )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=EPOCHS,
        use_distributed_sampler=False,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        enable_checkpointing=bool(every),
        num_sanity_val_steps=0,
    )
    trainer.fit(Tiny(pack, out, mode), ckpt_path=str(out / "resume.ckpt") if mode == "resume" else None)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], *(int(a) for a in sys.argv[4:]))
