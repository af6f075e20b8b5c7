"""Remote datasets end to end: pack to S3, inspect and verify the URL, read it byte-identical through the cache
(in the main process, with fork and with spawn workers), https:// datasets, and damage found by a remote verify."""

from __future__ import annotations

import numpy as np
import pytest

from fastdata import DataLoaderX, ShardDataset
from fastdata.cli import main as cli_main
from fastdata.packing.check import describe, verify
from fastdata.packing.packer import pack
from fastdata.storage.remote import get_store
from tests.storage.conftest import whole_gets


def test_pack_to_s3_uploads_shards_then_manifest_and_reads_back_identical(s3, many_images, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the old code wrote a local folder named "s3:" here
    url = s3.url("roundtrip-tfrecord")
    manifest = pack(many_images, url, format="tfrecord", samples_per_shard=10, workers=0, progress=False)
    local = tmp_path / "local"
    pack(many_images, local, format="tfrecord", samples_per_shard=10, workers=0, progress=False)
    puts = [path.rsplit("/", 1)[-1] for method, path in s3.proxy.log if method == "PUT" and "roundtrip" in path]
    assert puts[-1] == "manifest.json" and puts.count("manifest.json") == 1
    assert {s.path for s in manifest.shards} <= set(puts) and not (tmp_path / "s3:").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["local"]  # nothing staged or left behind here
    report = verify(url)
    assert report.ok and report.records == 64
    assert "samples   64" in describe(url) and url in describe(url)
    remote, reference = ShardDataset(url, cache_dir=tmp_path / "cache"), ShardDataset(local)
    assert len(remote) == len(reference) and remote.classes == reference.classes
    assert all(remote.read(i) == reference.read(i) for i in range(len(reference)))
    assert np.array_equal(remote[5][0], reference[5][0])
    with pytest.raises(FileExistsError, match="--overwrite"):
        pack(many_images, url, format="tfrecord", samples_per_shard=10, workers=0, progress=False)


def test_lmdb_shards_from_a_url_open_through_their_uploaded_sidecars(s3, many_images, tmp_path, monkeypatch):
    from fastdata.formats import lmdb_pages

    url = s3.url("lmdb-sidecars")
    opts = {"format": "lmdb", "samples_per_shard": 8, "workers": 0, "progress": False}
    manifest = pack(many_images, url, **opts)
    puts = [path.rsplit("/", 1)[-1] for method, path in s3.proxy.log if method == "PUT" and "sidecars" in path]
    assert {s.index for s in manifest.shards} <= set(puts)  # each shard's .loc went up with it
    reference = ShardDataset(pack(many_images, tmp_path / "local", **opts) and tmp_path / "local")
    expected = [reference.read(i) for i in range(len(reference))]

    def walk(*args, **kwargs):
        raise AssertionError("an LMDB shard's B-tree was walked")

    monkeypatch.setattr(lmdb_pages._Walker, "run", walk)
    remote = ShardDataset(url, cache_dir=tmp_path / "cache", max_open_shards=1)  # nearly every read re-opens
    order = np.random.default_rng(0).permutation(len(remote)).tolist()
    assert [remote.read(i) for i in order] == [expected[i] for i in order]


def test_cli_pack_inspect_verify_on_a_url(s3, many_images, tmp_path, capsys):
    url = s3.url("cli-lmdb")
    args = ["--format", "lmdb", "--samples-per-shard", "16", "--workers", "0", "--no-progress"]
    assert cli_main(["pack", str(many_images), url, *args]) == 0
    assert cli_main(["inspect", url]) == 0 and "shards    4" in capsys.readouterr().out
    assert cli_main(["verify", url]) == 0 and "OK: 64 records" in capsys.readouterr().out
    assert cli_main(["pack", str(many_images), url, *args, "--samples-per-shard", "32", "--overwrite"]) == 0
    assert get_store(url).size("shard-00003.lmdb") is None  # the old pack's extra shards are gone
    assert cli_main(["verify", url]) == 0 and "OK: 64 records" in capsys.readouterr().out
    assert cli_main(["pack", str(many_images), url, *args, "--resume"]) == 2


def test_verify_finds_a_damaged_remote_shard(s3, remote_pack, tmp_path):
    store = get_store(remote_pack.url)
    name = f"shard-00001.{remote_pack.format}"
    good = store.read(name)
    try:
        store.put(name, good[:100] + bytes([good[100] ^ 0x55]) + good[101:])
        report = verify(remote_pack.url, decode=False)
        assert not report.ok and all(name in p for p in report.problems)
        assert any("CRC32C" in p for p in report.problems)
    finally:
        store.put(name, good)


def _shape(image):
    return image.shape


def _as_list(batch):
    return batch


@pytest.mark.parametrize(
    ("context", "remote_pack"),
    [  # spawn runs once, on LMDB (per-process environments)
        ("fork", "tfrecord"),
        ("fork", "lmdb"),
        pytest.param("spawn", "lmdb", marks=pytest.mark.slow),
    ],
    indirect=["remote_pack"],
)
def test_workers_read_identical_bytes_with_fork_and_spawn(context, s3, remote_pack, tmp_path):
    remote = ShardDataset(remote_pack.url, cache_dir=tmp_path / "cache", transform=_shape)
    reference = ShardDataset(remote_pack.local, transform=_shape)
    loader = DataLoaderX(
        remote,
        batch_size=8,
        num_workers=2,
        multiprocessing_context=context,
        collate_fn=_as_list,
        persistent_workers=False,
    )
    got = [sample for batch in loader for sample in batch]
    assert got == [reference[i] for i in range(len(reference))]
    assert max(whole_gets(s3.proxy, remote_pack)) == 1  # no shard downloaded twice (some may be served by ranges)


def test_https_dataset_reads_identical_and_ranged_reads_check_206(http_server, remote_pack, tmp_path):
    import shutil

    server, www = http_server
    shutil.copytree(remote_pack.local, www / "ds")
    remote = ShardDataset(f"{server.url}/ds", cache_dir=tmp_path / "cache")
    reference = ShardDataset(remote_pack.local)
    assert all(remote.read(i) == reference.read(i) for i in range(len(reference)))
    if remote_pack.format == "tfrecord":  # a record served by a ranged GET while its shard downloads
        server.set_ignore_range(True)
        from fastdata.storage import RangeNotSupportedError

        with pytest.raises(RangeNotSupportedError):
            remote._remote._read_range(0, *remote._locate(0, 0))


def test_local_dataset_keeps_plan_a_no_op(remote_pack):
    local = ShardDataset(remote_pack.local)
    order = [3, 1, 2]
    assert local.plan(order) is order and not local.remote


def test_upload_of_a_local_pack_then_read(s3, remote_pack, tmp_path):
    from fastdata.storage.transfer import upload

    url = s3.url(f"uploaded-{remote_pack.format}")
    upload(remote_pack.local, url, overwrite=True)
    puts = [path.rsplit("/", 1)[-1] for method, path in s3.proxy.log if method == "PUT" and "uploaded" in path]
    assert puts[-1] == "manifest.json"
    remote, reference = ShardDataset(url, cache_dir=tmp_path / "cache"), ShardDataset(remote_pack.local)
    assert all(remote.read(i) == reference.read(i) for i in range(len(reference)))
    with pytest.raises(FileExistsError):
        upload(remote_pack.local, url)
