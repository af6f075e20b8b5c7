"""pack's progress bar shows bytes really written over time really spent, and its last figure is the whole pack's."""

import re

from fastdata.packing import pipeline
from fastdata.packing.packer import pack
from fastdata.packing.pipeline import throughput


def test_throughput_text():
    assert throughput(80_000_000, 1.0) == "80.0 MB/s"
    assert throughput(3_000_000, 2.0) == "1.5 MB/s"
    assert throughput(5, 0.0).endswith(" MB/s")  # no division by zero


def test_the_last_figure_is_all_bytes_written_over_all_time_spent(image_folder, tmp_path, monkeypatch, capsys):
    ticks: list[float] = []

    def clock() -> float:  # 0.3 ms per look at the clock, a figure every 1 ms: several during the pack
        ticks.append(len(ticks) * 0.0003)
        return ticks[-1]

    monkeypatch.setattr(pipeline, "_clock", clock)
    monkeypatch.setattr(pipeline, "_FIGURE_EVERY", 0.001)
    manifest = pack(
        image_folder.root, tmp_path / "out", format="tfrecord", samples_per_shard=5, workers=0, progress=True
    )
    figures = re.findall(r"([0-9.]+) MB/s", capsys.readouterr().err)
    written = sum(shard.nbytes for shard in manifest.shards)  # a TFRecord shard is exactly its records' bytes
    assert len(figures) >= 2
    assert figures[-1] == f"{written / 1e6 / (ticks[-1] - ticks[0]):.1f}"
