#!/usr/bin/env python
"""What does a shuffle cost, and how good is it? DistributedSampler's pass boundary at 10^8 samples, and the
shuffle quality and shard locality of each order."""

from _lib.dispatch import run

COMMANDS = {
    "pass-boundary": ("shuffle_pass.py", 'a pass boundary at 10^8 samples: shuffle=True against shuffle="index"'),
    "quality": ("shuffle_quality.py", "shuffle quality and shard locality of none, full, blocks, index, index-blocks"),
}

if __name__ == "__main__":
    run("shuffle.py", __doc__, COMMANDS)
