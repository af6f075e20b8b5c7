"""tools/pil_parity.py: fastdata against PIL on the generated corpus and on damaged JPEGs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import pil_parity  # noqa: E402


def test_generated_corpus_and_damaged_jpegs_match_pil(capsys):
    code = pil_parity.main(["--no-installed", "--decoders", "auto", "--jpeg-fuzz", "300", "--seed", "1"])
    out = capsys.readouterr().out
    assert "files PIL decodes that fastdata skips or decodes differently: 0" in out, out
    assert code == 0
    totals = next(line for line in out.splitlines() if line.startswith("all "))
    files, equal, skipped, differs, fastdata_only, both = map(int, totals.split()[1:])
    assert files > 450 and equal > 250 and both > 100 and skipped == differs == fastdata_only == 0


def test_a_mismatch_is_counted_named_and_fails(monkeypatch, capsys):
    class Wrong:
        def validate(self, data):
            raise pil_parity.DecodeError("made-up reason")

        decode = validate

    class Dark:
        def validate(self, data):
            return pil_parity.pil_reference(data)[0].shape[:2]

        def decode(self, data):
            return np.zeros_like(pil_parity.pil_reference(data)[0])

    files = {"a.png": pil_parity.odd_images.apng_with_separate_default()}
    monkeypatch.setattr(pil_parity, "get_decoder", lambda name: Wrong() if name == "auto" else Dark())
    results = pil_parity.run({"t": iter(files.items())}, ["auto", "opencv"])
    assert [(r.outcome, r.detail) for r in results] == [("skipped", "made-up reason"), ("differs", results[1].detail)]
    assert results[1].detail.startswith("mean abs diff")
    text = pil_parity.table(results)
    assert "files PIL decodes that fastdata skips or decodes differently: 2" in text
    assert "t:auto a.png: skipped (made-up reason)" in text
