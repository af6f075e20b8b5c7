"""Lightning: fit with DataLoaderX + fastdata.DistributedSampler on 2 CPU ranks (ddp, gloo); a fit resumed from a
mid-epoch checkpoint trains on exactly the batches (pixels and labels) of the uninterrupted run."""

from __future__ import annotations

import shutil

import pytest
import torch

from tests.trainers.common import EPOCHS, make_pack, read_seen, run

STEPS_PER_EPOCH = 24 // 2 // 2  # 24 samples, 2 ranks, batches of 2


@pytest.mark.slow
def test_fit_resumed_mid_epoch_sees_the_uninterrupted_runs_batches(tmp_path):
    pack, out = make_pack(tmp_path), tmp_path / "out"
    out.mkdir()
    script = ["tests/trainers/lightning_fit.py", str(pack), str(out)]
    run(script + ["full", "4"])  # checkpoints after steps 4 (mid first epoch), 8 (mid second) and 12
    checkpoint = out / "ckpt" / "step=4.ckpt"
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)["loops"]["fit_loop"]["state_dict"]
    [loader_state] = saved["combined_loader"]  # Lightning keeps DataLoaderX.state_dict() in its checkpoint
    assert loader_state["in_pass"] and loader_state["batches_consumed"] == 4
    shutil.copy(checkpoint, out / "resume.ckpt")
    run(script + ["resume"])
    for rank in (0, 1):
        full = read_seen(out, "full", rank)
        assert len(full) == EPOCHS * STEPS_PER_EPOCH and len(set(full)) == len(full)
        assert read_seen(out, "resume", rank) == full[4:]
    assert set(read_seen(out, "full", 0)).isdisjoint(read_seen(out, "full", 1))  # each rank its own samples
