#!/usr/bin/env python
"""What grows with the number of samples? Open time, pickled size, worker memory and open files from 1M to
16M samples, re-opening LMDB shards, and memory over many passes."""

from _lib.dispatch import run

COMMANDS = {
    "sweep": ("scale_sweep.py", "PSS, open time, descriptors per worker at N = 1M..16M (fresh process per probe)"),
    "open": ("scale_open.py", "what opening a pack costs: open time, pickled size, memory"),
    "reopen": ("scale_reopen.py", "re-opening an LMDB shard with its .loc sidecar and without"),
    "memory": ("scale_memory.py", "worker memory over many passes (the copy-on-read check)"),
    "manifest": ("scale_manifest.py", "reading a manifest of a million shards: parse, check, peak memory"),
}

if __name__ == "__main__":
    run("scale.py", __doc__, COMMANDS)
