"""
Train from a dataset on S3
==========================

A pack can live in a bucket: ``fastdata pack`` uploads each shard as it is finished (``manifest.json`` last), and
:class:`fastdata.ShardDataset` opens the ``s3://`` URL. Each node keeps a local cache of the shards
(``cache_dir``, bounded by ``cache_limit``): a shard is downloaded once per node, however many ranks and workers
want it, checked against the manifest's size and CRC32C before use, and the shards the next batches need are
downloaded ahead, in the order the sampler will read them.

So that it runs anywhere, this page serves S3 from `moto <https://github.com/getmoto/moto>`_ on 127.0.0.1 (the
``s3`` and ``test`` extras install boto3 and moto). With a real bucket, leave out the server and the endpoint:
credentials and region come from the usual environment (``AWS_ACCESS_KEY_ID``, ..., ``AWS_ENDPOINT_URL`` for
MinIO, R2 or Ceph). ``gs://`` (the ``gcs`` extra) and ``https://`` work the same way.
"""

# %%
# An S3 server on loopback
# ------------------------
# moto's server runs in a thread of this process. boto3 finds it through ``AWS_ENDPOINT_URL``; the credentials
# are moto's dummy ones.
import logging
import os
import shutil
import tempfile
from pathlib import Path

import boto3
import numpy as np
import torch
from moto.server import ThreadedMotoServer
from sample_images import make_images

import fastdata
from fastdata.transforms import RandomResizedCrop

logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the server's request log
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
host, port = server.get_host_and_port()
os.environ.update(
    AWS_ENDPOINT_URL=f"http://{host}:{port}",
    AWS_ACCESS_KEY_ID="testing",
    AWS_SECRET_ACCESS_KEY="testing",
    AWS_DEFAULT_REGION="us-east-1",
)
s3 = boto3.client("s3")
s3.create_bucket(Bucket="my-bucket")
print("buckets:", [bucket["Name"] for bucket in s3.list_buckets()["Buckets"]])

# %%
# Pack straight to the bucket
# ---------------------------
# The same call as for a local folder, with a URL as the output: shards are written locally, uploaded as each one
# is finished, and ``manifest.json`` is uploaded last, so a reader never sees a half-written dataset.
WORK = Path(tempfile.mkdtemp(prefix="fastdata-tutorial-"))


make_images(WORK / "images")
URL = "s3://my-bucket/train"
manifest = fastdata.pack(WORK / "images", URL, format="tfrecord", samples_per_shard=50, shuffle_seed=0, progress=False)
listing = s3.list_objects_v2(Bucket="my-bucket", Prefix="train/")["Contents"]
SHARDS = sum(o["Key"].endswith(".tfrecord") for o in listing)
print(f"{len(listing)} objects in {URL}:", ", ".join(sorted(Path(o["Key"]).name for o in listing)[:8]), "...")
print(fastdata.verify(URL))  # downloads and checks one shard at a time

# %%
# Read it through a node-local cache
# ----------------------------------
# ``cache_dir`` is a local disk shared by the node's ranks (by default ``$FASTDATA_CACHE`` or
# ``~/.cache/fastdata``); ``cache_limit`` bounds this dataset's share of it (here 2 MB: about 4 of its 6 shards),
# and shards no process is reading are evicted, the one needed furthest in the future first.
# ``DistributedSampler(shuffle="blocks")`` reads a few shards at a time, which is what a cache smaller than the
# dataset needs.
CACHE = WORK / "cache"
train = fastdata.ShardDataset(URL, transform=RandomResizedCrop(64), cache_dir=CACHE, cache_limit="2MB", prefetch=2)
sampler = fastdata.DistributedSampler(train, shuffle="blocks", block_shards=2)  # one process here: the whole pass
loader = fastdata.DataLoaderX(
    train, batch_size=50, sampler=sampler, num_workers=2, collate_fn=fastdata.NormalizeCollate(hflip_p=0.5)
)
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 3, stride=2),
    torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1),
    torch.nn.Flatten(),
    torch.nn.Linear(16, len(train.classes)),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
for epoch in range(2):
    sampler.set_epoch(epoch)
    losses = []
    for images, labels in loader:
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    cached = len(list(CACHE.rglob("*.tfrecord")))
    print(f"epoch {epoch}: loss {np.mean(losses):.3f}; shards in the cache now: {cached} of {SHARDS}")

# %%
# Clean up
# --------
server.stop()
shutil.rmtree(WORK)
