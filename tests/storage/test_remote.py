"""The clients: whole, ranged and streamed reads against moto (S3) and a Range-capable HTTP server; a server
that ignores Range is detected; clients are made per process and never cross a fork."""

from __future__ import annotations

import multiprocessing
import pickle

import pytest

from fastdata.storage.http_store import HTTPStore
from fastdata.storage.remote import get_store
from fastdata.storage.s3_store import S3Store
from fastdata.storage.store import RangeNotSupportedError, RemoteIOError
from tests.storage.servers import Fault

DATA = bytes(range(256)) * 400  # 102400 bytes


@pytest.fixture
def s3_object(s3):
    store = get_store(s3.url("remote-test"))
    store.put("blob.bin", DATA)
    s3.proxy.reset()
    return store


def test_s3_whole_ranged_size_and_missing(s3, s3_object):
    assert isinstance(s3_object, S3Store)
    assert s3_object.read("blob.bin") == DATA
    assert s3_object.read("blob.bin", 1000, 777) == DATA[1000:1777]
    assert b"".join(s3_object.stream("blob.bin")) == DATA
    assert s3_object.size("blob.bin") == len(DATA) and s3_object.size("nope.bin") is None
    with pytest.raises(FileNotFoundError, match="nope.bin"):
        s3_object.read("nope.bin")
    path = "/fastdata-test/remote-test/blob.bin"
    assert s3.proxy.gets(ranged=False)[path] == 2 and s3.proxy.gets(ranged=True)[path] == 1


def test_s3_truncated_body_raises_instead_of_returning_short_data(s3, s3_object):
    s3.proxy.faults.append(Fault("blob.bin", "truncate", times=1, ranged=False))
    with pytest.raises(RemoteIOError):
        b"".join(s3_object.stream("blob.bin"))


def test_http_ranged_read_needs_206(http_server):
    server, www = http_server
    (www / "ds").mkdir()
    (www / "ds" / "blob.bin").write_bytes(DATA)
    store = get_store(f"{server.url}/ds")
    assert isinstance(store, HTTPStore)
    assert store.read("blob.bin", 5, 10) == DATA[5:15]
    assert store.read("blob.bin") == DATA and store.size("blob.bin") == len(DATA)
    server.set_ignore_range(True)  # like python's http.server: 200 and the whole file
    with pytest.raises(RangeNotSupportedError, match="ignored the Range header"):
        store.read("blob.bin", 5, 10)
    with pytest.raises(FileNotFoundError):
        store.read("missing.bin")
    with pytest.raises(ValueError, match="read-only"):
        store.put("x", b"1")


def _child_client(store, queue):
    inherited = store._client  # the parent's client, copied by fork
    fresh = store.client()
    queue.put((fresh is not inherited and inherited is not None, store.read("blob.bin", 0, 4)))


def test_clients_are_per_process_and_never_pickled(s3_object):
    parent = s3_object.client()
    assert pickle.loads(pickle.dumps(s3_object))._client is None
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_client, args=(s3_object, queue))
    child.start()
    made_its_own, data = queue.get(timeout=60)
    child.join(60)
    assert made_its_own and data == DATA[:4]
    assert s3_object.client() is parent  # the parent's client is untouched


def test_fsspec_fallback_store_and_dataset(remote_pack, tmp_path):
    """Any fsspec protocol goes through FsspecStore; memory:// stands in for gs:// / az:// (no emulator here)."""
    pytest.importorskip("fsspec")
    from fastdata import ShardDataset
    from fastdata.storage.fsspec_store import FsspecStore
    from fastdata.storage.transfer import upload

    url = f"memory://bucket/{remote_pack.format}-{tmp_path.name}"
    store = get_store(url)
    assert isinstance(store, FsspecStore)
    store.put("blob.bin", DATA)
    assert store.read("blob.bin", 7, 9) == DATA[7:16] and store.size("blob.bin") == len(DATA)
    assert b"".join(store.stream("blob.bin")) == DATA and store.size("nope") is None
    with pytest.raises(RemoteIOError):
        store.read("blob.bin", len(DATA) - 4, 9)  # fewer bytes than asked for is an error, not a short read
    upload(remote_pack.local, url)
    remote, reference = ShardDataset(url, cache_dir=tmp_path / "cache"), ShardDataset(remote_pack.local)
    assert all(remote.read(i) == reference.read(i) for i in range(len(reference)))


def test_a_remote_dataset_pickles_in_a_few_kb_whatever_its_shards(tmp_path):
    """What a spawn/forkserver worker gets of a dataset at a URL: its manifest is read again from the node's
    mirrored copy (checked against the copy's key), not pickled (~400 bytes a shard before)."""
    pytest.importorskip("fsspec")
    from fastdata import ShardDataset
    from fastdata.formats.base import DatasetChangedError
    from fastdata.storage.transfer import upload
    from tests.packs import write_pack

    sizes = []
    for shards in (2, 300):
        url = f"memory://bucket/pickled-{shards}-{tmp_path.name}"
        upload(write_pack(tmp_path / f"tf{shards}", "tfrecord", shards, 2), url)
        ds = ShardDataset(url, cache_dir=tmp_path / "cache")
        blob = pickle.dumps(ds)
        sizes.append(len(blob))
        clone = pickle.loads(blob)
        assert [clone.read(i) for i in (0, len(ds) - 1)] == [ds.read(i) for i in (0, len(ds) - 1)]
    assert sizes[1] - sizes[0] < 400, sizes  # 298 more shards

    manifest = ds._remote.meta_root / "manifest.json"
    manifest.write_bytes(manifest.read_bytes().replace(b"{", b"{ ", 1))  # same JSON, not the bytes it was keyed by
    changed = pickle.loads(blob)
    assert changed._remote.plan(iter([0, 1]), changed._starts) is not None  # planning does not fail before a read
    with pytest.raises(DatasetChangedError, match="changed after this dataset was opened"):
        changed._remote.read(0, 0, 0)
    with pytest.raises(DatasetChangedError):
        changed.read(0)
