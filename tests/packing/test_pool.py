"""The packer's worker processes: ordered results, failures reported (never a hang), workers capped at the CPUs."""

import logging
import os
import signal
import time

import pytest

from fastdata._util.cpus import available_cpus
from fastdata.packing.packer import pack
from tests.packing.slow_pack import make_small_images


def square(x):
    return x * x


def fail_on_7(x):
    if x == 7:
        raise ZeroDivisionError("seven")
    return x


def die_on_7(x):
    if x == 7:
        os._exit(9)
    return x


def nap(x):
    time.sleep(0.05)
    return x


def children():
    import multiprocessing

    return [p for p in multiprocessing.active_children() if p.name.startswith("fastdata-pack")]


@pytest.mark.parametrize("workers,chunksize", [(1, 1), (2, 3), (3, 1), (5, 4)])
def test_results_in_order(workers, chunksize):
    from fastdata.packing.pool import OrderedProcessMap

    items = list(range(41))
    with OrderedProcessMap(square, items, workers=workers, chunksize=chunksize) as results:
        assert list(results) == [x * x for x in items]
    assert not children()


@pytest.mark.parametrize("fn,message", [(fail_on_7, "ZeroDivisionError: seven"), (die_on_7, "died with exit code 9")])
def test_worker_failure_is_an_error_not_a_hang(fn, message):
    from fastdata.packing.pool import OrderedProcessMap

    started = time.monotonic()
    with (
        pytest.raises(RuntimeError, match=message),
        OrderedProcessMap(fn, list(range(20)), workers=2, chunksize=2) as results,
    ):
        list(results)
    assert time.monotonic() - started < 10 and not children()


def test_interrupt_kills_workers_at_once():
    from fastdata.packing.pool import OrderedProcessMap

    started = time.monotonic()
    with (
        pytest.raises(KeyboardInterrupt),
        OrderedProcessMap(nap, list(range(400)), workers=2, chunksize=4) as results,
    ):
        for i, _ in enumerate(results):
            if i == 5:
                for proc in children():  # a terminal's Ctrl-C reaches the workers too: they ignore it
                    os.kill(proc.pid, signal.SIGINT)
                    os.kill(proc.pid, signal.SIGTERM)
                time.sleep(0.2)
                assert all(p.is_alive() for p in children())
                raise KeyboardInterrupt
    assert time.monotonic() - started < 3 and not children()


def test_workers_capped_at_the_cpu_count(tmp_path, caplog, monkeypatch):
    from multiprocessing.process import BaseProcess

    src = make_small_images(tmp_path / "src", 40)
    started = []
    real_start = BaseProcess.start

    def count(self):
        started.append(self.pid)
        real_start(self)

    monkeypatch.setattr(BaseProcess, "start", count)
    cpus = available_cpus()
    with caplog.at_level(logging.WARNING):
        pack(src, tmp_path / "out", format="lmdb", workers=1000, progress=False)
    assert f"workers=1000 capped at {cpus}, the number of CPUs this process may use" in caplog.text
    assert len(started) == cpus
    caplog.clear()
    pack(src, tmp_path / "default", format="lmdb", progress=False)  # the default is the CPU count, no note
    assert len(started) == 2 * cpus and "capped" not in caplog.text
