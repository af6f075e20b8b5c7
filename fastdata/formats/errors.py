"""The errors a reader raises instead of returning wrong data.

Both keep their type across DataLoader worker processes: torch rebuilds a worker's exception as
``type(exc)(message)``, so each accepts a single message argument.
"""

from __future__ import annotations

import os
import re

__all__ = ["CorruptRecordError", "DatasetChangedError"]


class CorruptRecordError(ValueError):
    """A record or file of a dataset is damaged (bad CRC, bad framing, wrong size, unparsable payload).

    Built from its parts, ``CorruptRecordError(shard, offset, reason)``, or from a finished message,
    ``CorruptRecordError(message)``: torch's DataLoader rebuilds an exception raised in a worker from
    its message alone, so the type survives ``num_workers > 0`` (``except CorruptRecordError`` and
    ``except ValueError`` both catch it); ``shard`` and ``offset`` are then read back from the message.

    Args:
        shard: the damaged file, or a whole message when ``offset`` and ``reason`` are left out.
        offset: byte offset (TFRecord) or record number (LMDB); None when the file as a whole is bad.
        reason: what is wrong.
        hint: what to do about it (e.g. which ``fastdata verify`` to run), appended to the message.

    Attributes:
        shard: the damaged file (None when the message does not name one).
        offset: as given (None for the file as a whole, or when the message does not say).
        reason: as given (None when rebuilt from a message it cannot be read back from).
        hint: as given.
    """

    def __init__(
        self, shard: str | os.PathLike, offset: int | None = None, reason: str | None = None, *, hint: str | None = None
    ) -> None:
        if offset is None and reason is None and hint is None:  # a finished message (torch's ExceptionWrapper)
            message = str(shard)
            self.shard, self.offset, self.reason = _parse_message(message)
            self.hint = None
            super().__init__(message)
            return
        self.shard = os.fspath(shard) if isinstance(shard, os.PathLike) else str(shard)
        self.offset = None if offset is None else int(offset)
        self.reason = "damaged" if reason is None else str(reason)
        self.hint = hint
        where = (
            f"corrupt record in {self.shard} at {self.offset}"
            if self.offset is not None
            else f"damaged file {self.shard}"
        )
        super().__init__(f"{where}: {self.reason}" + (f"; {hint}" if hint else ""))

    def with_hint(self, hint: str) -> CorruptRecordError:
        """The same error with ``hint`` (e.g. ``run `fastdata verify ROOT```) appended, unless it has one."""
        if self.hint or self.reason is None or self.shard is None:
            return self
        return type(self)(self.shard, self.offset, self.reason, hint=hint)

    def __reduce__(self) -> tuple:
        if self.reason is None or self.shard is None:
            return type(self), self.args
        return _rebuild, (type(self), self.shard, self.offset, self.reason, self.hint)


class DatasetChangedError(RuntimeError):
    """The files of a dataset were replaced (re-packed, say) after a :class:`ShardDataset` opened it.

    Raised instead of mixing the labels of one pack with the images of another; create a new
    ``ShardDataset`` (and DataLoader) over the new files. Takes one message, so it keeps its type
    across DataLoader workers.
    """


_MESSAGE = re.compile(
    r"(?:corrupt record in (?P<shard>.+?) at (?P<offset>-?\d+)|damaged file (?P<file>.+?)): (?P<reason>[^\n]*)"
)


def _parse_message(message: str) -> tuple[str | None, int | None, str | None]:
    """``(shard, offset, reason)`` from the last structured line of ``message`` (torch wraps it in a traceback)."""
    matches = list(_MESSAGE.finditer(message))
    if not matches:
        return None, None, None
    last = matches[-1]
    if last.group("file") is not None:
        return last.group("file"), None, last.group("reason")
    return last.group("shard"), int(last.group("offset")), last.group("reason")


def _rebuild(cls: type, shard: str, offset: int | None, reason: str, hint: str | None) -> CorruptRecordError:
    return cls(shard, offset, reason, hint=hint)
