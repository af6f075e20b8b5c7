"""``--engine ray`` on a local Ray cluster (2 CPUs, one per module): the same bytes as the local engine,
in both formats, to a folder and to the S3 endpoint (moto) the storage tests use."""

import os
from pathlib import Path

import boto3
import pytest

from fastdata.packing.packer import pack
from tests.storage.conftest import BUCKET, make_many_images, moto_server, s3, s3_session  # noqa: F401 - fixtures

ROOT = Path(__file__).resolve().parents[2]
OPTS = {"samples_per_shard": 3, "range_size": 6, "progress": False}


@pytest.fixture(scope="module")
def ray_cluster(s3_session):  # noqa: F811 - after the S3 environment is set, so the Ray workers inherit it
    import ray

    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)  # workers import tests.*
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    root = make_many_images(tmp_path_factory.mktemp("src"), count=30, classes=3)
    (root / "class02" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    return root


def files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


def objects(prefix: str) -> dict[str, bytes]:
    client = boto3.client("s3")
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix + "/").get("Contents", [])
    return {o["Key"][len(prefix) + 1 :]: client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listed}


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_ray_engine_writes_the_local_engines_bytes(ray_cluster, src, tmp_path, s3, fmt):  # noqa: F811
    local = pack(src, tmp_path / "local", format=fmt, workers=2, **OPTS)
    assert len(local.shards) > 5 and local.shards[-1].path.startswith("shard-00005-")  # several ranges

    on_ray = pack(src, tmp_path / "ray", format=fmt, engine="ray", **OPTS)
    assert on_ray == local
    assert files(tmp_path / "ray") == files(tmp_path / "local")

    url = s3.url(f"ray-{fmt}")
    pack(src, url, format=fmt, engine="ray", **OPTS)
    assert objects(f"ray-{fmt}") == files(tmp_path / "local")  # shards, indexes, labels, manifest; no range record


@pytest.mark.slow
def test_ray_engine_resume_redoes_only_missing_ranges(ray_cluster, src, tmp_path):
    """A range whose task died (its record and shards gone) is the only one a ``--resume`` on Ray packs again."""
    reference = tmp_path / "local"
    pack(src, reference, format="tfrecord", workers=0, **OPTS)
    out = tmp_path / "ray"
    pack(src, out, format="tfrecord", engine="ray", part=(0, 1), **OPTS)  # every range, no manifest yet
    (out / "part-00000-of-00001.json").unlink()
    (out / ".range-00002.json").unlink()  # as a task that died before publishing its record leaves it
    for shard in out.glob("shard-00002-*"):
        shard.unlink()
    kept = {p.name: p.stat().st_ino for p in out.glob("shard-*")}
    pack(src, out, format="tfrecord", engine="ray", resume=True, **OPTS)
    assert files(out) == files(reference)
    assert {p.name: p.stat().st_ino for p in out.glob("shard-*") if p.name in kept} == kept


@pytest.mark.slow
def test_ray_retries_a_task_killed_mid_range(ray_cluster, src, tmp_path):
    """The worker of range 2 is SIGKILLed half-way through it: Ray runs the task again and the pack is whole."""
    from fastdata.packing.engines import run_plan
    from fastdata.packing.identity import PackIdentity
    from fastdata.packing.options import PackOptions
    from fastdata.packing.sources import ImageFolderSource
    from tests.packing.ray_helpers import KillOnce

    reference = tmp_path / "local"
    pack(src, reference, format="lmdb", workers=0, **OPTS)
    inner = ImageFolderSource(src)
    rows = list(inner.scan())
    marker = tmp_path / "killed"
    source = KillOnce(inner, str(marker), at=rows[15].locator)  # range 2 holds rows 12..17: after one shard of 3
    options = PackOptions(format="lmdb", engine="ray", workers=0, **OPTS)
    run_plan(source, PackIdentity.of(options, source, len(rows), {}), tmp_path / "ray", options)
    assert marker.exists() and int(marker.read_text()) != os.getpid()  # a Ray worker died there
    assert files(tmp_path / "ray") == files(reference)
