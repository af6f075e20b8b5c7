import platform

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
    assert calls == [(_malloc.M_MMAP_THRESHOLD, _malloc.MMAP_THRESHOLD_BYTES)]


def test_dataset_pins_it_on_first_read(packed, monkeypatch):
    from fastdata.datasets.shard_dataset import ShardDataset
    import fastdata.datasets.shard_source as source_module

    calls = []
    monkeypatch.setattr(source_module, "pin_mmap_threshold", lambda: calls.append(1))
    ds = ShardDataset(packed[0])
    ds[0]
    ds[1]
    assert calls == [1]
