"""Progress reporting at a bounded rate."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Progress", "ProgressCallback"]

ProgressCallback = Callable[[int, int | None], None]
"""Called as ``callback(bytes_done, bytes_total)``; ``bytes_total`` is None when unknown."""

MIN_INTERVAL = 0.1


class Progress:
    """Counts bytes and calls the user's callback at most every 0.1 s, and once at the end."""

    __slots__ = ("_callback", "_last", "done", "total")

    def __init__(self, callback: ProgressCallback | None, total: int | None) -> None:
        self._callback = callback
        self.total = total
        self.done = 0
        self._last = 0.0

    def advance(self, n: int) -> None:
        self.done += n
        if self._callback is None:
            return
        now = time.monotonic()
        if now - self._last >= MIN_INTERVAL:
            self._last = now
            self._callback(self.done, self.total)

    def finish(self) -> None:
        if self._callback is not None:
            self._callback(self.done, self.total if self.total is not None else self.done)
