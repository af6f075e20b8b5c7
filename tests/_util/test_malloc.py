import platform
import subprocess
import sys

import pytest

from fastdata._util import malloc as _malloc


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_pins_the_mmap_threshold_once_per_process(monkeypatch):
    calls = []
    monkeypatch.setattr(_malloc, "_done_in_pid", None)
    real_cdll = _malloc.ctypes.CDLL

    class Spy:
        def __init__(self, name):
            self._lib = real_cdll(name)

        def mallopt(self, param, value):
            calls.append((param, value))
            return self._lib.mallopt(param, value)

    monkeypatch.setattr(_malloc.ctypes, "CDLL", Spy)
    assert _malloc.pin_mmap_threshold() is True
    assert _malloc.pin_mmap_threshold() is True
    assert calls == [
        (_malloc.M_MMAP_THRESHOLD, _malloc.MMAP_THRESHOLD_BYTES),
        (_malloc.M_TRIM_THRESHOLD, _malloc.TRIM_THRESHOLD_BYTES),
    ]


def test_dataset_pins_it_on_first_read(packed, monkeypatch):
    import fastdata.datasets.shard_source as source_module
    from fastdata.datasets.shard_dataset import ShardDataset

    calls = []
    monkeypatch.setattr(source_module, "pin_mmap_threshold", lambda: calls.append(1))
    ds = ShardDataset(packed[0])
    ds[0]
    ds[1]
    assert calls == [1]


SCRIPT = """
import resource, sys
from fastdata._util.malloc import pin_mmap_threshold
assert pin_mmap_threshold()
def batch():
    records = [b"x" * 100_000 for _ in range(80)]  # 8 MB of records below the mmap threshold: heap
    del records
batch()
start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    batch()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_freed_batch_heap_is_kept_for_the_next_batch():
    """The mmap threshold pinned alone pins glibc's trim threshold at 128 KB: a batch's freed records went back to
    the system and the next batch faulted them in again (about 5 faults per 100 KB record); the trim threshold is
    pinned high enough to keep a batch's worth."""
    faults = int(subprocess.run([sys.executable, "-c", SCRIPT], check=True, capture_output=True, text=True).stdout)
    assert faults < 200, f"{faults} page faults re-reading 5 batches of 8 MB: the heap was trimmed between batches"
