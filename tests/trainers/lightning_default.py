"""Lightning with everything at its defaults: ``DataLoaderX(dataset, batch_size=4, shuffle=True)`` (no generator, no
sampler) under a ``Trainer`` that keeps ``use_distributed_sampler`` and automatic checkpointing, on one CPU device.
Run by test_lightning.py as ``python tests/trainers/lightning_default.py OUT MODE [CKPT]``.

MODE ``full`` fits EPOCHS passes and checkpoints every CKPT_EVERY steps (mid-epoch ones included); ``resume`` fits
again from ``OUT/CKPT``. Each run seeds the process as a script would (``seed_everything``) and writes the sample
indices of the batches it trained on.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import Dataset

import fastdata
import tests.torchvision_shim  # noqa: F401 - before lightning imports torchvision (see the module)
from tests.trainers.common import EPOCHS

SAMPLES, BATCH, CKPT_EVERY = 24, 4, 4


class Points(Dataset):
    """Sample i: a fixed 8-vector and its index (the label is what the test reads back)."""

    def __init__(self) -> None:
        self.x = torch.linspace(-1, 1, SAMPLES * 8).view(SAMPLES, 8)

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int):
        return self.x[i], i


class Tiny(L.LightningModule):
    def __init__(self, out: Path, mode: str) -> None:
        super().__init__()
        self.layer, self.out, self.mode, self.seen = torch.nn.Linear(8, SAMPLES), out, mode, []

    def train_dataloader(self) -> fastdata.DataLoaderX:
        return fastdata.DataLoaderX(Points(), batch_size=BATCH, shuffle=True)

    def training_step(self, batch, _):
        x, index = batch
        self.seen.append(index.tolist())
        return F.cross_entropy(self.layer(x), index)

    def on_train_end(self) -> None:
        (self.out / f"{self.mode}.json").write_text(json.dumps(self.seen))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(out: str, mode: str, checkpoint: str = "") -> None:
    out = Path(out)
    L.seed_everything(0)
    every = ModelCheckpoint(dirpath=out / "ckpt", every_n_train_steps=CKPT_EVERY, save_top_k=-1, filename="{step}")
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=EPOCHS,
        callbacks=[every],
        default_root_dir=out,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Tiny(out, mode), ckpt_path=str(out / checkpoint) if checkpoint else None)


if __name__ == "__main__":
    main(*sys.argv[1:])
