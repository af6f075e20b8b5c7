"""Worker exceptions keep their type: torch rebuilds them as ``type(message)`` or gives up with ``RuntimeError``.

torch sends a worker's exception to the main process as its type and formatted traceback, then
calls ``type(message)``; a user exception whose ``__init__`` takes two or keyword-only arguments
fails that call and arrives as a ``RuntimeError``. :func:`keep_worker_exception_types` makes the
rebuild try harder: ``type(message)``, else the instance made without ``__init__`` (``__new__``
plus ``args``, as pickling does), else a ``RuntimeError`` whose first line names the original type.
"""

from __future__ import annotations

from typing import Any, NoReturn

from torch._utils import ExceptionWrapper

__all__ = ["TypedExceptionWrapper", "keep_worker_exception_types", "rebuild"]


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

    def reraise(self) -> NoReturn:
        if self.exc_type is KeyError or getattr(self.exc_type, "message", None):
            super().reraise()  # torch's own special cases
        message = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.exc_msg}"
        raise rebuild(self.exc_type, message) from None


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
