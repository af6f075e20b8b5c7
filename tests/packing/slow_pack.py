"""Run ``fastdata pack`` in a child process, slowed down per image so it can be caught mid-run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from tests.images import natural_image


def terminal_signals() -> None:
    """``preexec_fn``: SIGINT at its default, as in a terminal's foreground job. A background job of a
    non-interactive shell (a CI script's ``cmd &``) ignores SIGINT, its children inherit that, and a Python that
    starts with SIGINT ignored never raises KeyboardInterrupt: the Ctrl-C these tests send would be lost."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


SLOW_PACK = """
import importlib, os, sys, time
p = importlib.import_module("fastdata.packing.pipeline")  # where each image is loaded
real, delay = p._load, float(os.environ.get("FASTDATA_TEST_DELAY", "0.004"))
def slow(job):
    time.sleep(delay)
    return real(job)
p._load = slow
from fastdata.cli import main
sys.exit(main(sys.argv[1:]))
"""


def make_small_images(root: Path, count: int, *, seed: int = 5, size: tuple[int, int] = (24, 30)) -> Path:
    """``count`` small JPEGs (about ``size`` pixels) in 3 classes, and one broken file (the skip list is not empty)."""
    import cv2

    rng = np.random.default_rng(seed)
    for k in range(count):
        d = root / f"c{k % 3}"
        d.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(d / f"{k:04d}.jpg"), natural_image(rng, size[0] + k % 7, size[1]))
    (root / "c1" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 nope")
    return root


def start_pack(src: Path, out: Path, *args: str, delay: float = 0.004, session: bool = False) -> subprocess.Popen:
    """``python -c <slowed cli> pack SRC OUT --no-progress ARGS`` with this checkout first on the path.

    Args:
        session: start it in a new session (its own process group), so a signal can go to the
            whole group as a terminal's Ctrl-C does.
    """
    import fastdata

    env = dict(os.environ, FASTDATA_TEST_DELAY=str(delay))  # the child imports the fastdata this process uses
    paths = [str(Path(fastdata.__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2])]
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-c", SLOW_PACK, "pack", str(src), str(out), "--no-progress", *args]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=session,
        preexec_fn=terminal_signals,
    )


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """Wait until ``path`` exists (raise if ``proc`` ends first or time runs out)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{path.name} never appeared: rc={proc.poll()} {proc.communicate()}")
        time.sleep(0.002)


def all_files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path, with its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


ZYGOTE = """
import atexit, json, os, sys, time, importlib, traceback
p = importlib.import_module("fastdata.packing.pipeline")
real, delay = p._load, float(os.environ.get("FASTDATA_TEST_DELAY", "0.004"))
def slow(job):
    time.sleep(delay)
    return real(job)
p._load = slow
from fastdata.cli import main
for line in sys.stdin:
    log, *argv = json.loads(line)
    pid = os.fork()
    if pid == 0:  # the child: a fresh session, stdout/stderr to the log, then exactly what `fastdata` runs
        os.setsid()
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1)
        os.dup2(out, 2)
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()  # the command's own clean-up; not the interpreter's teardown (1-2 s with torch)
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)
    print(pid, flush=True)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


class PackZygote:
    """A process that imports fastdata once and forks a slowed ``fastdata`` command line per run.

    Interpreter start-up and the torch import take about 2 s per process, so a test that starts
    twenty packs pays them once: each run is ``fastdata.cli.main(argv)`` in a child forked from
    the zygote, in its own session (so a signal can go to its whole process group).
    """

    def __init__(self, delay: float = 0.004) -> None:
        import fastdata

        env = dict(os.environ, FASTDATA_TEST_DELAY=str(delay))
        paths = [str(Path(fastdata.__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2])]
        env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")])
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            preexec_fn=terminal_signals,
        )
        self._buffer = b""

    def start(self, log: Path, *argv: str) -> int:
        """Run ``fastdata ARGV`` (output to ``log``) in a new child; return its pid."""
        import json

        self.proc.stdin.write((json.dumps([str(log), *argv]) + "\n").encode())
        self.proc.stdin.flush()
        return int(self._line(120.0))

    def wait(self, timeout: float) -> int | None:
        """The exit code of the last run, or None if it is still running after ``timeout`` seconds."""
        line = self._line(timeout)
        return None if line is None else int(line)

    def _line(self, timeout: float) -> str | None:
        import select

        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                raise AssertionError(f"the zygote died: rc={self.proc.wait()}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def close(self) -> None:
        """Stop the zygote."""
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()
