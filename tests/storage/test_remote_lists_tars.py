"""File lists (.csv, .jsonl, .parquet) and WebDataset tars given by URL (https:// and s3://) pack exactly as
the same files do locally: lists streamed (or, Parquet, read by ranges), tars streamed once, images by range."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.packing.packer import pack
from tests.packing.sources_data import CLASSES, make_samples, write_csv, write_webdataset

OPTS = dict(format="lmdb", samples_per_shard=4, workers=0, progress=False, keep_bytes=True)
FIELDS = {
    "csv": ("caption", "count"),
    "jsonl": ("score", "tags", "boxes"),
    "parquet": ("score", "tags"),
    "tar": ("caption", "tags"),
}


def _write_all(www: Path) -> dict[str, str]:
    """Every list kind and a set of tars under ``www``; their paths relative to it (tars: a brace pattern)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    samples = make_samples(15)
    write_csv(www / "c", samples)
    (www / "j").mkdir()
    with open(www / "j" / "list.jsonl", "w") as f:
        for k, (data, label, fields) in enumerate(samples):
            (www / "j" / f"{k:03d}.jpg").write_bytes(data)
            f.write(json.dumps({"path": f"{k:03d}.jpg", "label": CLASSES[label], **fields}) + "\n")
    (www / "p" / "img").mkdir(parents=True)
    for k, (data, _, _) in enumerate(samples):
        (www / "p" / "img" / f"{k:03d}.jpg").write_bytes(data)
    table = pa.table(
        {
            "path": [f"img/{k:03d}.jpg" for k in range(len(samples))],
            "label": [label for _, label, _ in samples],
            "score": [f["score"] for _, _, f in samples],
            "tags": [f["tags"] for _, _, f in samples],
        }
    )
    pq.write_table(table, www / "p" / "list.parquet", row_group_size=4)
    pattern = write_webdataset(www / "w", samples, shards=3)
    return {"csv": "c/list.csv", "jsonl": "j/list.jsonl", "parquet": "p/list.parquet", "tar": "w/" + Path(pattern).name}


def _same_pack(local: Path, remote: Path, fields: tuple[str, ...]) -> None:
    a, b = ShardDataset(local, fields=fields), ShardDataset(remote, fields=fields)
    assert len(a) == len(b) == 15
    for i in range(len(a)):
        fa, fb = a.read_fields(i), b.read_fields(i)
        assert a.read(i) == b.read(i)
        assert json.dumps(fa, default=lambda v: v.tolist()) == json.dumps(fb, default=lambda v: v.tolist())


@pytest.mark.parametrize("kind", ["csv", "jsonl", "parquet", "tar"])
def test_a_list_or_tars_at_an_https_url_pack_as_the_local_files_do(http_server, tmp_path, kind):
    server, www = http_server
    rel = _write_all(www)[kind]
    local = pack(str(www / rel), tmp_path / "local", fields=FIELDS[kind], **OPTS)
    server.reset()
    remote = pack(f"{server.url}/{rel}", tmp_path / "remote", fields=FIELDS[kind], **OPTS)
    assert [s.crc32c for s in remote.shards] == [s.crc32c for s in local.shards]
    assert remote.options["field_types"] == local.options["field_types"] and remote.classes == local.classes
    _same_pack(tmp_path / "local", tmp_path / "remote", FIELDS[kind])
    whole, ranged = server.gets(rel.split("/")[0] + "/"), server.gets(rel.split("/")[0] + "/", ranged=True)
    if kind == "tar":  # each tar streamed once by the scan, each image one ranged read
        assert sorted(whole) == [f"/w/shard-{i:06d}.tar" for i in range(3)] and set(whole.values()) == {1}
        assert sum(ranged.values()) == 15
    elif kind == "parquet":  # the list read by ranges only (footer, row groups), never whole
        assert not any(p.endswith("list.parquet") for p in whole)
        assert any(p.endswith("list.parquet") for p in ranged)
    else:  # the list streamed, one whole GET per pass (columns, classes, count, digest, rows)
        passes = whole[f"/{rel}"]
        assert 1 <= passes <= 5 and not any(p.endswith(rel) for p in ranged)


def test_a_missing_list_or_tar_at_a_url_is_one_line(http_server, tmp_path):
    server, www = http_server
    _write_all(www)
    for src in (f"{server.url}/c/nope.csv", f"{server.url}/w/shard-{{000000..000003}}.tar"):
        with pytest.raises(FileNotFoundError) as info:
            pack(src, tmp_path / "out", **OPTS)
        assert "\n" not in str(info.value) and ("nope.csv" in str(info.value) or "000003" in str(info.value))


@pytest.mark.parametrize("kind", ["csv", "parquet", "tar"])
def test_a_list_or_tars_on_s3_pack_as_the_local_files_do(s3, tmp_path, kind):
    import boto3

    www = tmp_path / "www"
    www.mkdir()
    rel = _write_all(www)[kind]
    client = boto3.client("s3")
    for path in (www / rel.split("/")[0]).rglob("*"):
        if path.is_file():
            client.upload_file(str(path), "fastdata-test", f"lists-{kind}/{path.relative_to(www).as_posix()}")
    local = pack(str(www / rel), tmp_path / "local", fields=FIELDS[kind], **OPTS)
    remote = pack(s3.url(f"lists-{kind}/{rel}"), tmp_path / "remote", fields=FIELDS[kind], **OPTS)
    assert [s.crc32c for s in remote.shards] == [s.crc32c for s in local.shards]
    _same_pack(tmp_path / "local", tmp_path / "remote", FIELDS[kind])
