#!/usr/bin/env python
"""The read-path cost of fastdata's record checks, measured side by side in one run.

For an LMDB pack: records read by fastdata's reader (a bounds-checked walk of the B-tree at open,
then ``pread`` + CRC32C per record) against py-lmdb's own lookups on the same file (what the reader
did before: ``txn.get`` + CRC32C, which a damaged page can turn into SIGBUS). For a TFRecord pack:
fastdata's reader (framing CRCs, and one ``fstat`` per record so a shard rewritten in place raises)
against the same reads without the ``fstat``. Records only, no decode: the checks' share of a real
loader (which also decodes, ~2-5 ms per image) is smaller still. Methods alternate, median of rounds.

Usage::

    python bench/kernel.py read-checks [--images 3000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _lmdb_plain(path: Path, n: int, crcs) -> None:
    import google_crc32c
    import lmdb

    from fastdata.formats.lmdb_shards import sample_key

    env = lmdb.open(str(path), subdir=False, readonly=True, lock=False, readahead=True, max_readers=1024)
    with env.begin(buffers=False) as txn:
        for j in range(n):
            value = txn.get(sample_key(j))
            assert google_crc32c.value(value) == crcs[j]
    env.close()


def _fastdata(reader_factory, positions) -> None:
    reader = reader_factory()
    for position, size in positions:
        reader.read(position, size)
    reader.close()


def _without_fstat():
    """fastdata's TFRecord reader with the per-record ``fstat`` (the in-place rewrite check) taken out."""
    import os

    from fastdata.formats.tfrecord import TFRecordShardReader
    from fastdata.formats.tfrecord_framing import unframe

    class Unchecked(TFRecordShardReader):
        def read_payload(self, position: int, size: int) -> bytes:
            return unframe(os.pread(self._fd, size, position), shard=self.path, offset=position)

    return Unchecked


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    from fastdata.formats import get_format
    from fastdata.formats.lmdb_shards import LMDBShardReader
    from fastdata.formats.manifest import Manifest
    from fastdata.formats.tfrecord import TFRecordShardReader
    from fastdata.packing.packer import pack

    work = Path(tempfile.mkdtemp(prefix="read-checks-"))
    src = work / "src"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "make_imagenet_like.py"),
            str(src),
            "--num-images",
            str(args.images),
            "--num-classes",
            "10",
        ],
        check=True,
        capture_output=True,
    )
    methods = {}
    for fmt in ("lmdb", "tfrecord"):
        out = work / fmt
        pack(src, out, format=fmt, progress=False, samples_per_shard=args.images)
        manifest = Manifest.load(out)
        shard = manifest.shards[0]
        path = out / shard.path
        offsets, sizes = get_format(fmt).positions(out, shard)
        positions = list(zip(offsets.tolist(), sizes.tolist(), strict=False))
        if fmt == "lmdb":
            crcs = LMDBShardReader(path)._crc
            methods["lmdb: fastdata (checked page walk + pread)"] = lambda p=path, q=positions, s=shard: _fastdata(
                lambda: LMDBShardReader(p, expected=s), q
            )
            methods["lmdb: py-lmdb txn.get (unchecked pages)"] = lambda p=path, n=len(positions), c=crcs: _lmdb_plain(  # noqa: B008 (binds the count now)
                p, n, c
            )
        else:
            methods["tfrecord: fastdata (+ fstat per record)"] = lambda p=path, q=positions: _fastdata(
                lambda: TFRecordShardReader(p), q
            )
            methods["tfrecord: without the fstat"] = lambda p=path, q=positions: _fastdata(
                lambda: _without_fstat()(p), q
            )
    for run in methods.values():  # warm the page cache
        run()
    times: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(args.rounds):
        for name, run in methods.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    print(f"{args.images} ImageNet-like records, warm page cache, median of {args.rounds} alternating rounds")
    rates = {name: args.images / statistics.median(t) for name, t in times.items()}
    for name, rate in rates.items():
        print(f"  {name:<48} {rate:>10,.0f} records/s")
    names = list(rates)
    print(f"  LMDB checked / unchecked:     {rates[names[0]] / rates[names[1]]:.2f}x")
    print(f"  TFRecord with / without fstat: {rates[names[2]] / rates[names[3]]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
