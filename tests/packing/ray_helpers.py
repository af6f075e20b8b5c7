"""A source whose reader process dies (SIGKILL) the first time it opens one image: a Ray task killed mid-range.

Kept in its own small module: Ray workers import it to unpickle the tasks.
"""

from __future__ import annotations

import os
import signal

from fastdata.packing.sources.base import Source


class KillOnce(Source):
    """``inner``'s rows and bytes; opening ``at`` the first time (no ``marker`` file yet) kills the process."""

    name = "kill-once"

    def __init__(self, inner: Source, marker: str, at: str) -> None:
        super().__init__(inner.src)
        self.inner, self.marker, self.at = inner, marker, at
        self.classes, self.skipped = inner.classes, inner.skipped

    def scan(self):
        return self.inner.scan()

    def open(self, locator: str) -> bytes:
        if locator == self.at and not os.path.exists(self.marker):
            with open(self.marker, "w") as f:
                f.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return self.inner.open(locator)
