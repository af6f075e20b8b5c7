"""The CPU budget: affinity (taskset), cgroup quota (a fake cpu.max), SLURM_CPUS_PER_TASK."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings

import pytest

from fastdata._util.cpus import available_cpus, cgroup_cpu_limit

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.delenv("FASTDATA_CPUS", raising=False)


def _fake_cgroup(tmp_path, cpu_max: str, own: str = "/job/step"):
    """A cgroup v2 tree with ``cpu.max`` in the process's own cgroup and ``/proc/self/cgroup`` naming it."""
    folder = tmp_path / "cg" / own.strip("/")
    folder.mkdir(parents=True)
    (folder / "cpu.max").write_text(cpu_max + "\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text(f"0::{own}\n")
    return tmp_path / "cg", proc


def test_affinity_under_taskset_in_a_subprocess(clean_env):
    taskset = shutil.which("taskset")
    assert taskset, "taskset (util-linux) is needed by the tests: tools/setup.sh installs it"
    code = (
        "from fastdata._util.cpus import available_cpus; import os; "
        "print(available_cpus(), len(os.sched_getaffinity(0)))"
    )
    env = {**os.environ, "PYTHONPATH": REPO}
    first = str(min(os.sched_getaffinity(0)))  # a CPU this job may use (not always CPU 0 in a container)
    out = subprocess.run(
        [taskset, "-c", first, sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    assert out == ["1", "1"]


def test_cgroup_v2_quota_rounds_up(tmp_path, clean_env, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    root, proc = _fake_cgroup(tmp_path, "150000 100000")
    assert cgroup_cpu_limit(root, proc) == 1.5
    assert available_cpus(cgroup_root=root / "job") == 64  # no cpu.max on the way from this cgroup to the root
    (root / "cpu.max").write_text("150000 100000\n")  # the root is an ancestor of any cgroup: it binds this one
    assert available_cpus(cgroup_root=root) == 2


def test_cgroup_tightest_ancestor_and_max_means_none(tmp_path):
    root, proc = _fake_cgroup(tmp_path, "max 100000")
    assert cgroup_cpu_limit(root, proc) is None
    (root / "job" / "cpu.max").write_text("300000 100000\n")  # the parent's quota binds its children
    assert cgroup_cpu_limit(root, proc) == 3.0
    (root / "cpu.max").write_text("garbage\n")  # unreadable values are ignored
    assert cgroup_cpu_limit(root, proc) == 3.0


def test_cgroup_v1_quota(tmp_path):
    folder = tmp_path / "cg" / "cpu" / "docker" / "abc"
    folder.mkdir(parents=True)
    (folder / "cpu.cfs_quota_us").write_text("400000\n")
    (folder / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text("3:cpu,cpuacct:/docker/abc\n0::/\n")
    assert cgroup_cpu_limit(tmp_path / "cg", proc) == 4.0
    (folder / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_limit(tmp_path / "cg", proc) is None


def test_no_cgroup_files_means_no_limit(tmp_path):
    proc = tmp_path / "proc_cgroup"
    proc.write_text("0::/a/b\n")
    assert cgroup_cpu_limit(tmp_path / "missing", proc) is None


def test_slurm_and_override(monkeypatch, tmp_path, clean_env):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(256)))
    empty = tmp_path / "nothing"
    assert available_cpus(cgroup_root=empty) == 256
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "2")
    assert available_cpus(cgroup_root=empty) == 2
    monkeypatch.setenv("FASTDATA_CPUS", "1")
    assert available_cpus(cgroup_root=empty) == 1
    for bad in ("lots", "0", "-3", "2.5"):  # ignored, with a warning
        monkeypatch.setenv("FASTDATA_CPUS", bad)
        with pytest.warns(RuntimeWarning, match="ignoring FASTDATA_CPUS"):
            assert available_cpus(cgroup_root=empty) == 2


def test_fastdata_cpus_overrides_the_detected_count(monkeypatch, tmp_path, clean_env):
    # FASTDATA_CPUS sets the count: below the detected CPUs quietly, above them too (with a warning)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)))
    empty = tmp_path / "nothing"
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "2")
    assert available_cpus(cgroup_root=empty) == 2
    monkeypatch.setenv("FASTDATA_CPUS", "3")
    with pytest.warns(RuntimeWarning, match="FASTDATA_CPUS=3 is above the 2 CPUs"):
        assert available_cpus(cgroup_root=empty) == 3
    monkeypatch.setenv("FASTDATA_CPUS", "16")
    with pytest.warns(RuntimeWarning, match="oversubscribe"):
        assert available_cpus(cgroup_root=empty) == 16
    monkeypatch.setenv("FASTDATA_CPUS", "2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # equal to (or below) the detected count: no warning
        assert available_cpus(cgroup_root=empty) == 2


def test_fastdata_cpus_sets_the_pack_workers_above_the_detected_cpus(monkeypatch, clean_env):
    from fastdata.packing.pool import cap_workers

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setenv("FASTDATA_CPUS", "6")
    with pytest.warns(RuntimeWarning, match="FASTDATA_CPUS=6"):
        assert cap_workers(None) == 6


def test_pack_default_workers_follow_the_budget(monkeypatch, clean_env):
    from fastdata.packing.pool import cap_workers

    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    assert cap_workers(None) == 1
    assert cap_workers(8) == 1
