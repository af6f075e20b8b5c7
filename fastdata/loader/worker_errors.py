"""Worker exceptions keep their type: torch rebuilds them as ``type(message)`` or gives up with ``RuntimeError``.

torch sends a worker's exception to the main process as its type and formatted traceback, then
calls ``type(message)``; a user exception whose ``__init__`` takes two or keyword-only arguments
fails that call and arrives as a ``RuntimeError``. Here, in order:

1. in the worker (:class:`~fastdata.loader.worker_init.WorkerInit`, run before the user's ``worker_init_fn``), the
   exception is also pickled when it survives a pickle round trip as its own type; the main process re-raises
   that very object (attributes included), the worker's traceback added as a note;
2. else :func:`rebuild`: ``type(message)``, else the instance made without ``__init__`` (``__new__``
   plus ``args``), else a ``RuntimeError`` whose first line names the original type.

A batch the worker cannot send is an exception too: multiprocessing pickles each result in a
feeder thread and, when that fails (``EMFILE`` or ``ENOMEM`` while torch shares a tensor's memory by
file descriptor, a batch that does not pickle), prints the error and drops the result, and torch's
main loop waits for it forever. :func:`report_failed_sends` (run by ``WorkerInit``) makes the
worker's result queue send the error in the batch's place, so it reaches the training loop as that
batch's exception (an ``OSError`` keeps its type and errno).
"""

from __future__ import annotations

import functools
import os
import pickle
import sys
import traceback
from multiprocessing.queues import Queue as _MPQueue
from types import FrameType
from typing import Any, NoReturn

from torch._utils import ExceptionWrapper
from typing_extensions import override

__all__ = ["TypedExceptionWrapper", "add_note", "keep_worker_exception_types", "rebuild", "report_failed_sends"]


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)`` (PEP 678); Python 3.10 lacks it, so there the note is appended to ``__notes__``.

    Python 3.10's traceback does not print ``__notes__``; the note is kept where 3.11+ (and the ``exceptiongroup``
    backport's traceback) read it.
    """
    if sys.version_info >= (3, 11):
        exc.add_note(note)
    else:
        notes = exc.__dict__.setdefault("__notes__", [])
        notes.append(note)


def rebuild(exc_type: type[BaseException], message: str) -> BaseException:
    """An instance of ``exc_type`` carrying ``message``, or a ``RuntimeError`` that names ``exc_type``."""
    try:
        return exc_type(message)
    except Exception:  # noqa: BLE001 - its __init__ wants other arguments: build it without calling __init__
        pass
    try:
        exc = exc_type.__new__(exc_type, message)
        exc.args = (message,)
        str(exc)  # a __str__ that reads attributes __init__ would have set must not fail later, at print time
        return exc
    except Exception:  # noqa: BLE001 - it cannot be made at all: say which type it was
        name = f"{exc_type.__module__}.{exc_type.__qualname__}"
        return RuntimeError(f"{name} (could not be rebuilt in the main process): {message}")


class TypedExceptionWrapper(ExceptionWrapper):
    """torch's ``ExceptionWrapper`` whose ``reraise`` keeps the exception's type wherever it can be built."""

    pickled: bytes | None = None  # the exception itself, when the worker could pickle it faithfully

    def __init__(self, exc_info: Any = None, where: str = "in background") -> None:
        exc_info = sys.exc_info() if exc_info is None else exc_info
        super().__init__(exc_info, where)
        self.pickled = _faithful_pickle(exc_info[1])

    @override
    def reraise(self) -> NoReturn:
        if self.pickled is not None:
            try:
                exc = _loads(self.pickled)
            except Exception:  # noqa: BLE001 - its class is not importable here: rebuild it from the message
                exc = None
            if isinstance(exc, BaseException) and type(exc) is self.exc_type:
                add_note(exc, f"Raised {self.where}; original {self.exc_msg}")
                raise exc from None
        if self.exc_type is KeyError or getattr(self.exc_type, "message", None):
            super().reraise()  # torch's own special cases
        message = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.exc_msg}"
        raise rebuild(self.exc_type, message) from None


def _faithful_pickle(exc: BaseException | None) -> bytes | None:
    """``exc`` pickled so that it unpickles as its own type with the same message and attributes; else None.

    Pickle's own way first (``type(*args)``); for an ``__init__`` that does not take ``args`` back
    (two or keyword-only arguments), its class, ``args`` and ``__dict__``, rebuilt without ``__init__``.
    """
    if exc is None or isinstance(exc, KeyError):
        return None
    for data in (_dumps(exc), _dumps(_State(type(exc), exc.args, getattr(exc, "__dict__", {})))):
        try:
            clone = _loads(data)
            if clone is not None and type(clone) is type(exc) and str(clone) == str(exc):
                return data
        except Exception:  # noqa: BLE001 - any failure: the next way, or torch's path (type and message)
            continue
    return None


class _State:
    """An exception's class, ``args`` and attributes: what rebuilds it without calling ``__init__``."""

    def __init__(self, cls: type[BaseException], args: tuple, attrs: dict[str, Any]) -> None:
        self.cls, self.args, self.attrs = cls, args, dict(attrs)

    def build(self) -> BaseException:
        exc = self.cls.__new__(self.cls, *self.args)
        exc.args = self.args
        exc.__dict__.update(self.attrs)
        return exc


def _dumps(obj: Any) -> bytes | None:
    try:
        return pickle.dumps(obj)
    except Exception:  # noqa: BLE001 - an attribute that does not pickle (a lock, a file)
        return None


def _loads(data: bytes | None) -> BaseException | None:
    if data is None:
        return None
    obj = pickle.loads(data)
    return obj.build() if isinstance(obj, _State) else obj


def report_failed_sends(worker_id: int) -> None:
    """Make this worker's result queue send the error of a result it fails to send, in its place.

    Called from torch's worker loop (before its first result); the queue is that loop's ``data_queue``.
    Where it cannot be found, every multiprocessing queue of this process does it for results shaped as
    torch's, ``(batch index, data)``.
    """
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "_worker_loop" and "data_queue" in frame.f_locals):
        frame = frame.f_back
    result_queue = frame.f_locals["data_queue"] if frame is not None else None
    if isinstance(result_queue, _MPQueue):
        result_queue._on_queue_feeder_error = functools.partial(  # type: ignore[attr-defined]  # private: not in typeshed
            _send_error_instead, result_queue, worker_id
        )
    else:  # torch's worker loop changed: the same for every queue of this worker process (a bound method)
        _MPQueue._on_queue_feeder_error = functools.partialmethod(  # type: ignore[attr-defined]  # private: not in typeshed
            _send_error_instead_of, worker_id
        )


_default_feeder_error = _MPQueue._on_queue_feeder_error  # type: ignore[attr-defined]  # private: not in typeshed


class _SendFailure(TypedExceptionWrapper):
    """The error that stood in for a result the worker's queue could not send."""


def _send_error_instead_of(some_queue: Any, worker_id: int, exc: Exception, obj: Any) -> None:
    """The fallback: for any queue of the worker, results shaped as torch's only; others as multiprocessing does."""
    _send_error_instead(some_queue, worker_id, exc, obj, results_only=False)


def _send_error_instead(
    result_queue: Any, worker_id: int, exc: Exception, obj: Any, *, results_only: bool = True
) -> None:
    """Multiprocessing's feeder thread could not send ``obj``: put its batch's error in its place.

    Runs in the feeder thread, which sends what is put here next. A result whose batch cannot be told (its
    bytes failed to send, or the error itself failed) ends the worker, which torch's loop reports within seconds.
    """
    index = obj[0] if isinstance(obj, tuple) and len(obj) == 2 else None
    if not isinstance(index, int) or isinstance(index, bool):
        index = None
    if getattr(result_queue, "_closed", False):  # the worker is shutting down: nobody waits for this result
        _default_feeder_error(exc, obj)
        return
    if index is not None and not isinstance(obj[1], _SendFailure):
        where = f"in DataLoader worker process {worker_id}, sending batch {index} to the main process"
        try:
            result_queue.put((index, _SendFailure((type(exc), exc, exc.__traceback__), where=where)))
            return
        except Exception:  # noqa: BLE001 - nothing can stand in for the result: end the worker below
            pass
    if index is None and not results_only:
        _default_feeder_error(exc, obj)  # not a result of torch's: print it, as multiprocessing does
        return
    traceback.print_exception(exc)
    sys.stderr.write(
        f"DataLoader worker process {worker_id} could not send a result ({exc!r}) and exits, so that the "
        "main process does not wait for it\n"
    )
    sys.stderr.flush()
    os._exit(1)


def keep_worker_exception_types(torch_iter: Any) -> None:
    """Make a multi-process torch iterator re-raise its workers' exceptions through :class:`TypedExceptionWrapper`."""
    process = getattr(torch_iter, "_process_data", None)
    if process is None or getattr(process, "_keeps_types", False):
        return

    def process_data(data: Any, *args: Any, **kwargs: Any) -> Any:
        if type(data) is ExceptionWrapper:
            data.__class__ = TypedExceptionWrapper
        return process(data, *args, **kwargs)

    process_data._keeps_types = True  # type: ignore[attr-defined]
    torch_iter._process_data = process_data
