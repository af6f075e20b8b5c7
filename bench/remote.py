#!/usr/bin/env python
"""How fast is a dataset in an object store? Shards served by a local S3 server (moto, loopback) against the
same shards on disk: first batch and images/s, cold and warm node cache."""

from _lib.dispatch import run

COMMANDS = {
    "throughput": ("remote.py", "remote against local shards: first-batch latency and images/s, cold and warm"),
}

if __name__ == "__main__":
    run("remote.py", __doc__, COMMANDS)
