"""A batch lost between the workers and the main process ends the pass with its error, at once, never a hang.

torch's multi-process iterator waits for each batch in turn. When a batch's result reaches the main
process but cannot be rebuilt there (``EMFILE`` while receiving a tensor's descriptor, ``EOFError`` when
the worker could not hand one over, a dead pin-memory thread), or a worker dies, that batch never comes:
torch raises once, and the next ``next()`` would wait forever. ``DataLoaderX``'s background thread goes
on after a batch's own exception (as torch's iterator does); after one of these it stops, and the training
loop gets the error, the receiving error itself where torch names only its consequence ("Pin memory
thread exited unexpectedly"), with a note saying that the pass ended. A timeout (``timeout=``) is not
one: the batch may still come, and the pass goes on.

The workers' side (a result a worker cannot send) is :func:`fastdata.loader.worker_errors.report_failed_sends`.
"""

from __future__ import annotations

import queue
from typing import Any

from fastdata.loader.worker_errors import batch_errors

__all__ = ["lost_batch", "watch_receives"]

_TIMEOUT = "DataLoader timed out after"  # torch's message when a batch took longer than timeout=


def watch_receives(torch_iter: Any) -> None:
    """Record the errors of results the main process fails to receive from ``torch_iter``'s workers (once per queue)."""
    result_queue = getattr(torch_iter, "_worker_result_queue", None)
    if result_queue is None or hasattr(result_queue, "_receive_errors"):
        return
    errors: list[BaseException] = []
    get = result_queue.get

    def recording_get(*args: Any, **kwargs: Any) -> Any:
        try:
            return get(*args, **kwargs)
        except queue.Empty:
            raise
        except Exception as exc:
            errors.append(exc)
            del errors[:-1]
            raise

    result_queue._receive_errors = errors
    result_queue.get = recording_get


def lost_batch(torch_iter: Any, exc: Exception, errors_before: int) -> BaseException | None:
    """The error to end the pass with when ``exc`` (raised by ``next(torch_iter)``) lost a batch; None when it did not.

    A batch's own exception (one of :func:`~fastdata.loader.worker_errors.batch_errors`, now more than
    ``errors_before``), any error of a single-process iterator, and torch's timeout lose nothing.
    """
    if not hasattr(torch_iter, "_rcvd_idx") or not hasattr(torch_iter, "_workers"):
        return None  # a single-process iterator: every error is its batch's own
    if batch_errors(torch_iter) != errors_before:
        return None
    if isinstance(exc, RuntimeError) and str(exc).startswith(_TIMEOUT):
        return None
    received = getattr(getattr(torch_iter, "_worker_result_queue", None), "_receive_errors", None)
    error: BaseException = exc
    if received:
        error = received.pop()
        received.clear()
        if error is not exc:
            error.add_note(f"torch's DataLoader then raised: {type(exc).__name__}: {exc}")
    if isinstance(error, (EOFError, ConnectionError)):
        error.add_note("DataLoaderX: a worker could not hand a batch's shared memory over (its error output above says "
                       "why; a worker out of file descriptors is the usual cause: raise `ulimit -n`, or lower "
                       "ShardDataset(max_open_shards=...))")
    error.add_note("DataLoaderX: this batch was lost between a worker and the main process, so the pass ends here")
    return error
