"""What a pack is made of is worked out once (``PackIdentity.of``): the journal, the manifest, the range records and
a part file record the same option values and fingerprint, in the journal format older packs wrote."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

from fastdata.packing.identity import PackIdentity
from fastdata.packing.journal import PackJournal
from fastdata.packing.merge import merge
from fastdata.packing.options import PackOptions
from fastdata.packing.packer import pack
from fastdata.packing.ranges import record_name
from tests.packing.slow_pack import make_small_images

OPTS = dict(format="tfrecord", samples_per_shard=4, workers=0, progress=False)


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    return make_small_images(tmp_path_factory.mktemp("identity") / "src", 10)


def _sha256(recorded: dict) -> str:
    """The fingerprint as every journal, range record and part file has written it."""
    return hashlib.sha256(json.dumps(recorded, sort_keys=True).encode()).hexdigest()


def test_journal_manifest_ranges_and_parts_record_the_same_options(src, tmp_path, monkeypatch):
    started = []
    real_start = PackJournal.start
    monkeypatch.setattr(PackJournal, "start", lambda self, header: (started.append(header), real_start(self, header)))
    manifest = pack(src, tmp_path / "whole", **OPTS)
    (journal,) = started
    part = pack(src, tmp_path / "parts", part=(0, 1), **OPTS)
    part_header = json.loads(part.path.read_text())["header"]
    record_header = json.loads((tmp_path / "parts" / record_name(0)).read_text())["header"]
    merged = merge(str(tmp_path / "parts"))

    assert journal["options"] == manifest.options == part_header["options"] == record_header["options"]
    assert merged.options == manifest.options and "source_files" in manifest.options
    fingerprints = {journal["fingerprint"], part_header["fingerprint"], record_header["fingerprint"]}
    assert fingerprints == {_sha256(manifest.options)}
    assert journal["files"] == part_header["files"] == manifest.num_samples + len(manifest.skipped)
    assert sorted(journal) == ["files", "fingerprint", "options", "src"]  # the first line older journals have
    assert sorted(part_header) == ["classes", "files", "fingerprint", "options", "ranges"]
    assert part_header == record_header and part_header["classes"] == manifest.classes


@pytest.mark.parametrize(
    "extra",
    [{}, {"range_size": 4}, {"range_size": 4, "part": (0, 2)}, {"append": True, "allow_duplicates": True}],
    ids=["local", "ranges", "part", "append"],
)
def test_the_recorded_options_are_worked_out_once_per_pack(src, tmp_path, monkeypatch, extra):
    out = tmp_path / "out"
    if extra.get("append"):
        pack(src, out, **OPTS)
    calls: Counter[str] = Counter()
    real_recorded, real_of = PackOptions.recorded, PackIdentity.of.__func__

    def recorded(self):
        calls["recorded"] += 1
        return real_recorded(self)

    def of(cls, *args, **kwargs):
        calls["of"] += 1
        return real_of(cls, *args, **kwargs)

    monkeypatch.setattr(PackOptions, "recorded", recorded)
    monkeypatch.setattr(PackIdentity, "of", classmethod(of))
    pack(src, out, **OPTS, **extra)
    assert calls == {"recorded": 1, "of": 1}
