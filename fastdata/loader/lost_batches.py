"""A batch lost between the workers and the main process ends the pass with its error, at once, never a hang.

torch's multi-process iterator waits for each batch in turn. When a batch's result reaches the main
process but cannot be rebuilt there (``EMFILE`` while receiving a tensor's descriptor, ``EOFError`` when
the worker could not hand one over), that batch never comes: torch raises once, and the next ``next()``
waits for it forever (with ``pin_memory`` the receiving thread dies, and every later ``next()`` raises
"Pin memory thread exited unexpectedly"). ``DataLoaderX``'s background thread goes on after a batch's own
exception, as torch's iterator does; after a failed receipt it stops, and the training loop gets the
receiving error itself, with a note saying that the pass ended. Other errors (a worker's, a timeout, a
worker that died, whose batches torch skips) leave the pass going, as in torch.

The workers' side (a result a worker cannot send) is :func:`fastdata.loader.worker_errors.report_failed_sends`.
"""

from __future__ import annotations

import queue
from typing import Any

from fastdata.loader.worker_errors import add_note

__all__ = ["lost_batch", "watch_receives"]


def watch_receives(torch_iter: Any) -> None:
    """Record the errors of results the main process fails to receive from ``torch_iter``'s workers, from now on."""
    result_queue = getattr(torch_iter, "_worker_result_queue", None)
    if result_queue is None:
        return  # a single-process iterator
    errors = getattr(result_queue, "_receive_errors", None)
    if errors is not None:  # a persistent worker's queue, watched since an earlier pass
        errors.clear()
        return
    errors = []
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


def lost_batch(torch_iter: Any, exc: Exception) -> BaseException | None:
    """The error to end the pass with after a failed receipt, else None.

    The error to end the pass with when ``exc`` (raised by ``next(torch_iter)``) followed a failed receipt, else
    None.

    The error is the receipt's (``exc`` itself, or what torch raised as its consequence is added as a note).
    """
    received = getattr(getattr(torch_iter, "_worker_result_queue", None), "_receive_errors", None)
    if not received:
        return None
    error: BaseException = received.pop()
    received.clear()
    if error is not exc:
        add_note(error, f"torch's DataLoader then raised: {type(exc).__name__}: {exc}")
    if isinstance(error, (EOFError, ConnectionError)):
        add_note(
            error,
            "DataLoaderX: a worker could not hand a batch's shared memory over (its error output above says "
            "why; a worker out of file descriptors is the usual cause: raise `ulimit -n`, or lower "
            "ShardDataset(max_open_shards=...))",
        )
    add_note(error, "DataLoaderX: this batch was lost between a worker and the main process, so the pass ends here")
    return error
