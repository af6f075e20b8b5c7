"""
Train with Lightning
====================

A :class:`fastdata.DataLoaderX` is a ``torch.utils.data.DataLoader`` to Lightning: return it from
``train_dataloader`` and a default ``Trainer`` runs it. Two things come on top. Lightning saves
``DataLoaderX.state_dict()`` inside its checkpoints, so ``fit(ckpt_path=...)`` from a checkpoint taken in the
middle of an epoch trains on exactly the batches an uninterrupted run would have seen next. And the batch
augmentations of :mod:`fastdata.gpu_transforms` fit Lightning's ``on_after_batch_transfer`` hook, which runs on the
device after Lightning has moved the uint8 batch there.

Here one CPU device trains for two epochs, checkpointing every 4 steps, then a second fit resumes from the
checkpoint taken at step 4, in the middle of the first epoch.
"""

# %%
# Pack some images
# ----------------
import hashlib
import logging
import shutil
import tempfile
import warnings
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from sample_images import make_images

import fastdata
from fastdata import gpu_transforms as T
from fastdata.transforms import RandomResizedCrop

WORK = Path(tempfile.mkdtemp(prefix="fastdata-tutorial-"))


make_images(WORK / "images")
manifest = fastdata.pack(WORK / "images", WORK / "shards", format="tfrecord", progress=False)

# %%
# The LightningModule
# -------------------
# ``train_dataloader`` returns a ``DataLoaderX`` of uint8 batches (:func:`fastdata.fast_collate`).
# ``on_after_batch_transfer`` flips and normalizes them where Lightning put them (the GPU, on a GPU machine).
# It also records a digest of each batch's crops, so that the two runs below can be compared.


class Classifier(L.LightningModule):
    def __init__(self, shards: Path) -> None:
        super().__init__()
        self.shards = shards
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, stride=2),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(16, 3),
        )
        # The flip draws from its own generator: draws from torch's global RNG would shift the next epoch's order,
        # which DataLoaderX draws from the global RNG, as torch's DataLoader does.
        flip = T.RandomHorizontalFlip(generator=torch.Generator().manual_seed(0))
        self.augment = T.Compose([flip, T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)])
        self.seen: list[int] = []

    def train_dataloader(self) -> fastdata.DataLoaderX:
        dataset = fastdata.ShardDataset(self.shards, transform=RandomResizedCrop(64))
        return fastdata.DataLoaderX(
            dataset, batch_size=30, shuffle=True, num_workers=2, collate_fn=fastdata.fast_collate, drop_last=True
        )

    def on_after_batch_transfer(self, batch, dataloader_idx):
        images, labels = batch  # uint8 [30, 3, 64, 64] on the device, int64 [30]
        self.seen.append(hashlib.sha1(images.cpu().numpy().tobytes()).hexdigest())  # the crops, in order
        return self.augment(images, labels)

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss = torch.nn.functional.cross_entropy(self.net(images), labels)
        self.log("loss", loss, prog_bar=False)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.2, momentum=0.9)


logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # Lightning's start-up notes, not ours
# Two notes of Lightning's that say nothing about this run: a deprecation inside Lightning under this torch, and
# that the resumed run writes its checkpoints to another folder than the run it resumes.
warnings.filterwarnings("ignore", message=r".*LeafSpec.*")
warnings.filterwarnings("ignore", message=r".*dirpath has changed.*")


def fit(checkpoints: Path, ckpt_path=None) -> Classifier:
    L.seed_everything(0, verbose=False)  # each epoch's order is drawn from the global RNG, as torch's loader does
    model = Classifier(WORK / "shards")
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        callbacks=[ModelCheckpoint(checkpoints, every_n_train_steps=4, save_top_k=-1, filename="{step}")],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, ckpt_path=ckpt_path)
    return model


# %%
# Train, then resume from the middle of the first epoch
# -----------------------------------------------------
full = fit(WORK / "ckpt")
print(f"uninterrupted: {len(full.seen)} steps (2 epochs of {len(full.seen) // 2})")
state = torch.load(WORK / "ckpt" / "step=4.ckpt", weights_only=False)["loops"]["fit_loop"]["state_dict"]
print("the loader's state in the step-4 checkpoint:", state["combined_loader"][0]["batches_consumed"], "batches")
resumed = fit(WORK / "ckpt-resumed", ckpt_path=WORK / "ckpt" / "step=4.ckpt")
print(
    f"resumed at step 4: {len(resumed.seen)} steps, the same batches as steps 4.. of the uninterrupted run:",
    resumed.seen == full.seen[4:],
)
shutil.rmtree(WORK)

# %%
# On several GPUs
# ---------------
# Give each rank its part with a :class:`fastdata.DistributedSampler` and tell Lightning not to replace it:
# ``Trainer(strategy="ddp", use_distributed_sampler=False)``, ``DataLoaderX(dataset, sampler=sampler, ...)`` in
# ``train_dataloader``, and ``self.trainer.train_dataloader.sampler.set_epoch(self.current_epoch)`` in
# ``on_train_epoch_start``. The resume works the same way, each rank with its own loader state.
