"""With a DistributedSampler, a resumed pass's crops depend on the sampler's seed and epoch, never on torch's global
seed.

The resumed half runs in a fresh process seeded differently (``torch.manual_seed``), with 2 workers.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from tests.loader.test_augmentation import batches, same

BUILD = textwrap.dedent("""
    import torch
    from torch.utils.data.distributed import DistributedSampler as TorchDistributedSampler
    from fastdata.datasets.shard_dataset import ShardDataset
    from fastdata.loader.collate import fast_collate
    from fastdata.loader.dataloader import DataLoaderX
    from fastdata.sampler import DistributedSampler
    from fastdata.transforms import RandomResizedCrop

    def build(root, kind):
        dataset = ShardDataset(root, transform=RandomResizedCrop(24, scale=(0.05, 1.0)))
        cls = TorchDistributedSampler if kind == "torch" else DistributedSampler
        sampler = cls(dataset, num_replicas=2, rank=1, seed=7)
        sampler.set_epoch(3)
        return DataLoaderX(dataset, batch_size=2, sampler=sampler, num_workers=2, collate_fn=fast_collate,
                           pin_memory=False)
""")

RESUME = BUILD + textwrap.dedent("""
    import pickle, sys
    import numpy as np
    root, kind, state_path, out_path = sys.argv[1:5]
    torch.manual_seed(987654)  # another global seed than the interrupted run's
    loader = build(root, kind)
    with open(state_path, "rb") as f:
        loader.load_state_dict(pickle.load(f))
    result = [(images.numpy().copy(), labels.tolist()) for images, labels in loader]
    with open(out_path, "wb") as f:
        pickle.dump(result, f)
""")


@pytest.mark.parametrize("packed", ["lmdb"], indirect=True)
@pytest.mark.parametrize("kind", ["torch", "fastdata"])
def test_resumed_crops_do_not_depend_on_the_global_torch_seed(packed, kind, tmp_path):
    root, _ = packed
    scope: dict = {}
    exec(BUILD, scope)  # noqa: S102 - the same builder as the fresh process's
    build = scope["build"]
    torch.manual_seed(1)
    uninterrupted = batches(build(str(root), kind))
    assert len(uninterrupted) >= 3
    torch.manual_seed(1)
    first = build(str(root), kind)
    before = batches(first, limit=1)
    (tmp_path / "state.pkl").write_bytes(pickle.dumps(first.state_dict()))
    del first
    proc = subprocess.run(
        [sys.executable, "-c", RESUME, str(root), kind, str(tmp_path / "state.pkl"), str(tmp_path / "after.pkl")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    after = pickle.loads((tmp_path / "after.pkl").read_bytes())
    assert [b[1] for b in before + after] == [b[1] for b in uninterrupted]  # the order was always restored
    assert same(before + after, uninterrupted)  # and now the crops too
    torch.manual_seed(2)
    assert same(batches(build(str(root), kind)), uninterrupted)  # a fresh run's global seed does not matter either
    assert not np.array_equal(uninterrupted[0][0], uninterrupted[1][0])
