"""A file list whose rows name images by URL packs them through the storage layer (here, over HTTP)."""

from __future__ import annotations

from fastdata.packing.packer import pack
from tests.packing.sources_data import make_samples, read_back


def test_list_rows_with_urls_are_read_through_storage(http_server, tmp_path):
    server, www = http_server
    samples = make_samples(6)
    for k, (data, _, _) in enumerate(samples):
        (www / f"{k}.jpg").write_bytes(data)
    lines = ["url,label"] + [f"{server.url}/{k}.jpg,{label}" for k, (_, label, _) in enumerate(samples)]
    lines.append(f"{server.url}/missing.jpg,0")
    (tmp_path / "list.csv").write_text("\n".join(lines) + "\n")
    manifest = pack(
        tmp_path / "list.csv", tmp_path / "out", format="tfrecord", workers=0, progress=False, keep_bytes=True
    )
    assert [r[:2] for r in read_back(tmp_path / "out")[1]] == [(d, label) for d, label, _ in samples]
    assert [s.path for s in manifest.skipped] == [f"{server.url}/missing.jpg (row 7)"]
