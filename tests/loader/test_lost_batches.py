"""No hang when a batch cannot travel: a worker's failed send becomes that batch's exception; a batch lost on
the main side ends the pass at once; a consumer never waits for a producer that died.

The loaders run in subprocesses whose timeout is the hang detector (torch's old behaviour is to wait forever).
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fastdata.loader.background import _END, StoppableBackgroundGenerator

REPO = Path(__file__).resolve().parents[2]
HANG_S = 120

FAILED_SENDS = """
import json, sys
from fastdata import DataLoaderX
from tests.loader.unsendable import PartlyUnsendable, as_is

got = []
loader = DataLoaderX(PartlyUnsendable(), batch_size=None, num_workers=2, collate_fn=as_is,
                     multiprocessing_context=sys.argv[1])
it = iter(loader)
for _ in range(10):
    try:
        got.append(int(next(it)[0][0]))
    except Exception as exc:
        got.append([type(exc).__name__, getattr(exc, "errno", None), str(exc)])
print(json.dumps(got))
"""


def run(script: str, *args: str) -> str:
    try:
        done = subprocess.run(
            [sys.executable, "-c", script, *args], cwd=REPO, capture_output=True, text=True, timeout=HANG_S
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the loader hung (killed after {HANG_S} s); its stderr ended with:\n{(exc.stderr or b'')[-3000:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_batch_its_worker_cannot_send_arrives_as_that_batchs_exception(context):
    got = json.loads(run(FAILED_SENDS, context))
    assert [g for g in got if isinstance(g, int)] == [0, 1, 2, 4, 6, 8, 9]  # the pass goes on, in order
    emfile, nomem, unpicklable = got[3], got[5], got[7]
    assert emfile[:2] == ["OSError", errno.EMFILE] and "Too many open files" in emfile[2]
    assert nomem[0] == "MemoryError" and "no memory" in nomem[2]
    assert "pickle" in unpicklable[2].lower() or "lambda" in unpicklable[2]


LOST_ON_RECEIPT = """
import errno, json, time
import torch
import torch.multiprocessing.reductions as reductions
from fastdata import DataLoaderX

rebuild, calls = reductions.rebuild_storage_fd, [0]

def failing_rebuild(*args):  # the main process receives the descriptor of a batch's shared memory
    calls[0] += 1
    if calls[0] == 6:
        raise OSError(errno.EMFILE, "Too many open files")
    return rebuild(*args)

reductions.rebuild_storage_fd = failing_rebuild
loader = DataLoaderX(torch.arange(64).float(), batch_size=4, num_workers=2)
it, got = iter(loader), []
try:
    for batch in it:
        got.append(batch.tolist())
    result = {"ended": "without an error"}
except OSError as exc:
    result = {"errno": exc.errno, "notes": getattr(exc, "__notes__", [])}
    start = time.monotonic()
    try:  # a loop that catches and goes on must not wait forever for the lost batch
        after = next(it)
        result["next"] = "a batch"
    except StopIteration:
        result["next"] = "StopIteration"
    result["next_s"] = time.monotonic() - start
result["batches"] = len(got)
print(json.dumps(result))
"""


def test_a_batch_lost_on_receipt_ends_the_pass_with_its_error():
    result = json.loads(run(LOST_ON_RECEIPT))
    assert result.get("errno") == errno.EMFILE, result
    assert any("pass ends here" in note for note in result["notes"]), result
    assert result["next"] == "StopIteration", result  # the pass is over: no batch of it can be waited for
    assert result["batches"] < 16


def test_a_consumer_never_waits_for_a_producer_that_died():
    class Broken(StoppableBackgroundGenerator):
        def _put(self, item):  # the producer dies before it can hand anything over
            raise MemoryError("no memory for the queue")

    excepthook, threading.excepthook = threading.excepthook, lambda args: None
    try:
        bg = Broken(iter([1, 2, 3]), max_prefetch=2)
        taken = []
        waiter = threading.Thread(target=lambda: taken.append(bg.take()), daemon=True)
        waiter.start()
        waiter.join(HANG_S)
    finally:
        threading.excepthook = excepthook
    assert not waiter.is_alive(), "take() waits forever for a producer that is gone"
    kind, payload, _ = taken[0]
    assert kind == _END and isinstance(payload, RuntimeError) and "prefetch thread ended" in str(payload)
