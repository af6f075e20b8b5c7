"""Lightning: fit with DataLoaderX + fastdata.DistributedSampler on 2 CPU ranks (ddp, gloo), and with a plain
DataLoaderX(shuffle=True) under a default Trainer; a fit resumed from a mid-epoch checkpoint trains on exactly the
batches of the uninterrupted run."""

from __future__ import annotations

import json
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


@pytest.mark.slow
def test_default_trainer_with_shuffle_and_no_generator_resumes_mid_epoch(tmp_path):
    """The simplest drop-in, DataLoaderX(dataset, shuffle=True), under a default Trainer (use_distributed_sampler and
    automatic checkpointing kept): checkpoints succeed, and a fit resumed mid-epoch trains on the batches of the
    uninterrupted run, the rest of that epoch and the next one."""
    script = ["tests/trainers/lightning_default.py", str(tmp_path)]
    run(script + ["full"])  # checkpoints after steps 4 (mid first epoch), 8 (mid second) and 12
    full = json.loads((tmp_path / "full.json").read_text())
    assert len(full) == 12 and all(sorted(sum(full[e * 6 : (e + 1) * 6], [])) == list(range(24)) for e in (0, 1))
    assert full[:6] != full[6:]  # each epoch its own order
    saved = torch.load(tmp_path / "ckpt" / "step=4.ckpt", map_location="cpu", weights_only=False)
    [loader_state] = saved["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert loader_state["in_pass"] and loader_state["batches_consumed"] == 4
    assert isinstance(loader_state["sampler_seed"], int)  # the pass's seed, drawn from the global RNG
    for step in (4, 8):
        mode = f"resume{step}"
        run(script + [mode, f"ckpt/step={step}.ckpt"])
        assert json.loads((tmp_path / f"{mode}.json").read_text()) == full[step:], f"resumed at step {step}"
