"""URL parsing: remote vs local, bucket and prefix, cache folder names."""

from pathlib import Path

import pytest

from fastdata.storage.urls import default_cache_dir, is_url, local_path, parse_url, url_id


def test_is_url_tells_remote_from_local():
    assert is_url("s3://bucket/x") and is_url("gs://b/x") and is_url("https://host/data")
    assert not is_url("/data/x") and not is_url("relative/x") and not is_url(Path("s3:/x"))
    assert not is_url("file:///data/x")
    assert local_path("file:///data/x") == Path("/data/x")


def test_parse_url_splits_bucket_and_prefix():
    loc = parse_url("s3://bucket/a/b/")
    assert (loc.scheme, loc.bucket, loc.prefix, loc.url) == ("s3", "bucket", "a/b", "s3://bucket/a/b")
    assert loc.key("shard-00000.tfrecord") == "a/b/shard-00000.tfrecord"
    assert parse_url("S3://bucket").key("m.json") == "m.json"


@pytest.mark.parametrize("bad", ["/local/path", "s3://", "s3://bucket/../x"])
def test_parse_url_rejects_bad_urls(bad):
    with pytest.raises(ValueError, match="url="):
        parse_url(bad)


def test_url_id_is_stable_and_distinct():
    assert url_id("s3://b/imagenet") == url_id("s3://b/imagenet/")
    assert url_id("s3://b/imagenet") != url_id("s3://c/imagenet")
    assert url_id("s3://b/imagenet").startswith("imagenet-")


def test_default_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("FASTDATA_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("FASTDATA_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "x" / "fastdata"
