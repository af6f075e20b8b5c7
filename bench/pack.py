#!/usr/bin/env python
"""How fast does fastdata pack? Per source kind, per engine (a local process pool against Ray), and the cost
of the lossless JPEG re-coding that gives random access."""

from _lib.dispatch import run

COMMANDS = {
    "sources": ("pack_sources.py", "images/s per source kind: folder, CSV/JSONL, Parquet, WebDataset, shards, HTTP"),
    "engines": ("pack_engines.py", "--engine local against --engine ray with the same CPUs"),
    "transcode": ("pack_transcode.py", "lossless re-coding (the default) against --keep-bytes: speed and sizes"),
}

if __name__ == "__main__":
    run("pack.py", __doc__, COMMANDS)
