"""Fixtures for the storage tests: moto's S3 server on loopback behind a counting, fault-injecting proxy,
and small packed datasets uploaded to it (and kept locally, to compare bytes against)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.images import encode, natural_image
from tests.storage.servers import LoopbackServer, ProxyHandler, RangeFileHandler, aws_env

BUCKET = "fastdata-test"


@dataclass
class S3:
    """The loopback S3 endpoint the tests use."""

    proxy: LoopbackServer
    upstream: tuple[str, int]
    env: dict[str, str]

    def url(self, name: str) -> str:
        return f"s3://{BUCKET}/{name}"


@pytest.fixture(scope="session")
def moto_server():
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        yield server.get_host_and_port()
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_session(moto_server):
    proxy = LoopbackServer(ProxyHandler, upstream=tuple(moto_server))
    env = aws_env(proxy.url)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import boto3

    boto3.client("s3").create_bucket(Bucket=BUCKET)
    try:
        yield S3(proxy, tuple(moto_server), env)
    finally:
        proxy.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def s3(s3_session):
    """The S3 endpoint with GET counts and faults cleared for this test."""
    s3_session.proxy.reset()
    yield s3_session
    s3_session.proxy.reset()


def make_many_images(root: Path, count: int = 64, classes: int = 8, seed: int = 1) -> Path:
    """``count`` small distinct JPEGs in ``classes`` class folders."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        folder = root / f"class{i % classes:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"img{i:04d}.jpg").write_bytes(encode(natural_image(rng, 40 + i % 7, 48), "JPEG", quality=90))
    return root


@dataclass
class RemotePack:
    """One dataset packed locally and uploaded (by ``pack(src, url)``)."""

    url: str
    local: Path
    format: str
    num_shards: int


def whole_gets(proxy: LoopbackServer, remote: RemotePack) -> list[int]:
    """Whole-object (not ranged) GETs of each shard file of ``remote``, by shard number."""
    prefix = "/" + remote.url[len("s3://") :]
    gets = proxy.gets(f"{prefix}/shard-", ranged=False)
    return [gets.get(f"{prefix}/shard-{i:05d}.{remote.format}", 0) for i in range(remote.num_shards)]


@pytest.fixture(scope="session")
def many_images(tmp_path_factory) -> Path:
    return make_many_images(tmp_path_factory.mktemp("many_src"))


@pytest.fixture(scope="session", params=["tfrecord", "lmdb"])
def remote_pack(request, s3_session, many_images, tmp_path_factory) -> RemotePack:
    """64 images, 4 per shard (16 shards), packed to a local folder and to S3."""
    from fastdata.packing.packer import pack

    fmt = request.param
    local = tmp_path_factory.mktemp(f"local_{fmt}")
    manifest = pack(many_images, local, format=fmt, samples_per_shard=4, workers=0, progress=False)
    url = s3_session.url(f"many-{fmt}")
    pack(many_images, url, format=fmt, samples_per_shard=4, workers=0, progress=False, overwrite=True)
    return RemotePack(url=url, local=local, format=fmt, num_shards=len(manifest.shards))


@pytest.fixture
def http_server(tmp_path):
    """An HTTP file server with Range support over ``tmp_path / "www"``."""
    www = tmp_path / "www"
    www.mkdir()
    server = LoopbackServer(RangeFileHandler, directory=str(www))
    yield server, www
    server.close()
