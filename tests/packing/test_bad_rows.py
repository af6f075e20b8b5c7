"""Bad rows of a list are skipped and listed with their row number and reason; ``--strict`` fails on them."""

from __future__ import annotations

import json

from fastdata.cli import main
from fastdata.packing.packer import pack
from tests.packing.sources_data import make_samples, read_back


def write_bad_list(root):
    samples = make_samples(3)
    root.mkdir()
    for k, (data, _, _) in enumerate(samples):
        (root / f"{k}.jpg").write_bytes(data)
    (root / "broken.jpg").write_bytes(b"\xff\xd8\xff not a jpeg")
    rows = [
        {"path": "0.jpg", "label": "ant"},
        {"path": "missing.jpg", "label": "ant"},  # row 2: no such file
        {"path": "1.jpg", "label": [1, 2]},  # row 3: a label of the wrong type
        {"path": "broken.jpg", "label": "bee"},  # row 4: undecodable
        {"label": "bee"},  # row 5: no path
        {"path": "2.jpg", "label": "bee"},
    ]
    lines = [json.dumps(r) for r in rows]
    lines.insert(5, "{not json")  # row 6: not a JSON object
    (root / "list.jsonl").write_text("\n".join(lines) + "\n")
    return root / "list.jsonl", samples


def test_bad_rows_are_skipped_and_listed_with_row_and_reason(tmp_path):
    src, samples = write_bad_list(tmp_path / "src")
    manifest = pack(src, tmp_path / "out", format="tfrecord", workers=0, progress=False, keep_bytes=True)
    assert [r[:2] for r in read_back(tmp_path / "out")[1]] == [(samples[0][0], 0), (samples[2][0], 1)]
    reasons = {s.path: s.reason for s in manifest.skipped}
    assert set(reasons) == {"missing.jpg (row 2)", "1.jpg (row 3)", "broken.jpg (row 4)", "row 5", "row 6"}
    assert "No such file" in reasons["missing.jpg (row 2)"]
    assert "not an integer or a class name" in reasons["1.jpg (row 3)"]
    assert "no image path" in reasons["row 5"] and "not a JSON object" in reasons["row 6"]
    assert reasons["broken.jpg (row 4)"]


def test_strict_exits_non_zero_naming_the_row(tmp_path, capsys):
    src, _ = write_bad_list(tmp_path / "src")
    code = main(
        ["pack", str(src), str(tmp_path / "out"), "--format", "lmdb", "--strict", "--workers", "0", "--no-progress"]
    )
    assert code == 2
    assert "row" in capsys.readouterr().err
    assert not (tmp_path / "out" / "manifest.json").exists()
    assert main(["pack", str(src), str(tmp_path / "out2"), "--format", "lmdb", "--workers", "0", "--no-progress"]) == 0
