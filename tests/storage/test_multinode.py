"""Two nodes on one machine: two cache folders, two S3 proxies (one per node, to count each node's GETs),
2 ranks per node (torch.distributed, gloo) x 2 DataLoader workers each, all reading one dataset from S3."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.storage.conftest import whole_gets
from tests.storage.servers import LoopbackServer, ProxyHandler
from tests.test_distributed import free_port

NODES, RANKS_PER_NODE = 2, 2
WORLD = NODES * RANKS_PER_NODE


def _collate(batch):
    return batch


def _rank_main(rank: int, url: str, endpoints: list[str], cache_root: str, port: int, out: str) -> None:
    node = rank // RANKS_PER_NODE
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), AWS_ENDPOINT_URL=endpoints[node])
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        from fastdata import DataLoaderX, DistributedSampler, ShardDataset
        from tests.storage.helpers import Crc

        dataset = ShardDataset(url, transform=Crc(), cache_dir=os.path.join(cache_root, f"node{node}"))
        sampler = DistributedSampler(dataset, shuffle=True, seed=7)
        loader = DataLoaderX(
            dataset, batch_size=4, sampler=sampler, num_workers=2, collate_fn=_collate, multiprocessing_context="fork"
        )
        crcs = [crc for batch in loader for crc, _ in batch]
        dataset.close()
        gathered = [None] * WORLD
        dist.all_gather_object(gathered, {"indices": list(sampler), "crcs": crcs})
        if rank == 0:
            torch.save(gathered, out)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("remote_pack", ["tfrecord"], indirect=True)  # LMDB's waiting readers: test_cache's racers
def test_two_nodes_download_each_shard_at_most_once_per_node(s3, remote_pack, tmp_path):
    from fastdata import ShardDataset
    from tests.storage.helpers import Crc

    proxies = [LoopbackServer(ProxyHandler, upstream=s3.upstream) for _ in range(NODES)]
    try:
        out = tmp_path / "gathered.pt"
        args = (remote_pack.url, [p.url for p in proxies], str(tmp_path / "cache"), free_port(), str(out))
        mp.start_processes(_rank_main, args=args, nprocs=WORLD, start_method="spawn")
        gathered = torch.load(out)
        per_node = [whole_gets(p, remote_pack) for p in proxies]
    finally:
        for proxy in proxies:
            proxy.close()
    reference = ShardDataset(remote_pack.local, transform=Crc())
    indices = [i for r in gathered for i in r["indices"]]
    assert sorted(indices) == list(range(len(reference)))  # every sample once across the 4 ranks
    for r in gathered:
        assert r["crcs"] == [reference[i][0] for i in r["indices"]]  # byte-identical, in sampler order
    assert all(max(counts) <= 1 for counts in per_node), per_node  # at most one download per shard per node
    print(f"\nwhole-shard GETs per node: {[sum(c) for c in per_node]} of {remote_pack.num_shards} shards")
