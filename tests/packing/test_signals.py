"""Ctrl-C and SIGTERM always stop ``fastdata pack`` within seconds, leaving a folder that ``--resume`` finishes."""

import os
import signal
import subprocess
import time

import pytest

from fastdata.formats.manifest import Manifest
from fastdata.packing.journal import JOURNAL_NAME
from fastdata.packing.packer import pack
from tests.packing.slow_pack import PackZygote, all_files, make_small_images, start_pack, wait_for

ARGS = ("--format", "lmdb", "--samples-per-shard", "20", "--workers", "2")
STARTUP_MOMENTS = [0.2, 0.8, 1.5]  # seconds after `python` started: interpreter start-up, imports, scan
PACK_MOMENTS = [0.6 * k / 16 for k in range(17)]  # seconds after the pack began writing: pool start ... the end


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_small_images(tmp_path_factory.mktemp("signal_src") / "src", 300)


@pytest.fixture(scope="module")
def reference(src, tmp_path_factory):
    out = tmp_path_factory.mktemp("signal_ref") / "out"
    pack(src, out, format="lmdb", samples_per_shard=20, workers=0, progress=False)
    return all_files(out)


def signal_group(proc, sig, timeout=5.0):
    """Send ``sig`` to the process group (as a terminal or service manager does); return (rc, stderr, seconds)."""
    os.killpg(proc.pid, sig)
    sent = time.monotonic()
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"pack did not stop within {timeout} s of {sig.name}: it hung") from None
    seconds = time.monotonic() - sent
    assert_group_gone(proc.pid)
    return proc.returncode, err, seconds


def assert_group_gone(pgid):
    """No process of the pack's group is left running (zombies, already dead, do not count: a container's
    init may not reap e.g. the ``ldconfig`` that ``ctypes.util.find_library`` starts)."""
    time.sleep(0.05)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return
    ps = subprocess.run(
        ["ps", "-o", "pid=,stat=,ppid=,etime=,wchan:20=,cmd=", "-g", str(pgid)], capture_output=True, text=True
    ).stdout
    alive = [line for line in ps.splitlines() if line.split()[1:2] and not line.split()[1].startswith("Z")]
    assert not alive, "processes of the pack outlived it:\n" + "\n".join(alive)


def finish_and_compare(src, out, reference):
    """``--resume`` what the interrupted run left (if it got that far) and compare with an undisturbed pack."""
    if not out.exists() or not ((out / JOURNAL_NAME).exists() or (out / "manifest.json").exists()):
        return False
    pack(src, out, format="lmdb", samples_per_shard=20, workers=2, resume=True, progress=False)
    assert all_files(out) == reference, out
    return True


def check_interrupted(code, err, anchor, out):
    if code == 130:  # fastdata caught it: one line, no traceback
        assert "interrupted; run the same command with --resume" in err and "Traceback" not in err, err
        assert not list(out.glob("*.tmp"))  # (the manifest may be written: the signal came as it finished)
    elif anchor == "start":  # before fastdata's main() runs the imports decide how the process ends: Python's
        pass  # KeyboardInterrupt (-2), a failed import (1), or a C++ extension's std::terminate (-6); it must end
    else:  # it finished before the signal (-2: the signal came as the interpreter was exiting)
        assert code in (0, -signal.SIGINT) and (out / "manifest.json").exists(), (code, err)


@pytest.mark.slow
def test_twenty_ctrl_c_in_a_row_never_hang(src, reference, tmp_path):
    """20 Ctrl-Cs (SIGINT to the whole process group, as a terminal sends it) at different moments.

    The first 3 hit real ``python`` processes during start-up; the other 17 hit the pack while it
    writes, in children forked from a zygote that imported fastdata once (to keep the test short).
    """
    stops, resumed = [], 0
    for i, delay in enumerate(STARTUP_MOMENTS):
        out = tmp_path / f"start{i}"
        proc = start_pack(src, out, *ARGS, delay=0.003, session=True)
        time.sleep(delay)
        code, err, seconds = signal_group(proc, signal.SIGINT)
        stops.append(seconds)
        check_interrupted(code, err, "start", out)
        finish_and_compare(src, out, reference)
    zygote = PackZygote(delay=0.003)
    try:
        for i, delay in enumerate(PACK_MOMENTS):
            out, log = tmp_path / f"pack{i}", tmp_path / f"pack{i}.log"
            pid = zygote.start(log, "pack", str(src), str(out), "--no-progress", *ARGS)
            deadline = time.monotonic() + 60
            while not (out / JOURNAL_NAME).exists():
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.002)
            time.sleep(delay)
            os.killpg(pid, signal.SIGINT)
            sent = time.monotonic()
            code = zygote.wait(timeout=5.0)
            if code is None:
                os.killpg(pid, signal.SIGKILL)
                raise AssertionError(f"run {i}: pack did not stop within 5 s of Ctrl-C: it hung")
            stops.append(time.monotonic() - sent)
            assert_group_gone(pid)
            check_interrupted(code, log.read_text(), "pack", out)
            shards = list(out.glob("shard-*.lmdb"))
            resumed += finish_and_compare(src, out, reference) and bool(shards) and code == 130
    finally:
        zygote.close()
    assert len(stops) == 20 and max(stops) < 5.0
    assert resumed >= 5, f"only {resumed} runs were interrupted after a complete shard: make the pack slower"


@pytest.mark.slow
def test_sigterm_stops_like_ctrl_c_and_resumes_byte_identical(src, reference, tmp_path):
    out = tmp_path / "out"
    proc = start_pack(src, out, *ARGS, delay=0.003, session=True)
    wait_for(out / JOURNAL_NAME, proc)
    # the first complete shard, however busy the machine (a fixed sleep was too short under load)
    deadline = time.monotonic() + 60
    while not list(out.glob("shard-*.lmdb")):
        assert proc.poll() is None and time.monotonic() < deadline, "pack ended or stalled before its first shard"
        time.sleep(0.005)
    code, err, seconds = signal_group(proc, signal.SIGTERM)
    assert code == 143 and "terminated; run the same command with --resume" in err and "Traceback" not in err, err
    assert seconds < 5.0 and not (out / "manifest.json").exists() and not list(out.glob("*.tmp"))
    assert list(out.glob("shard-*.lmdb")), "no shard was complete: make the pack slower"
    assert finish_and_compare(src, out, reference)
    assert Manifest.load(out).skipped[0].path == "c1/broken.jpg"
