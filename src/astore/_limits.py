"""Store-wide limits: request slots, the buffered-bytes budget, the CPU bridge's threads."""

from __future__ import annotations

import os
from collections import deque

import anyio

__all__ = ["ByteBudget", "Limits"]


class ByteBudget:
    """A semaphore counted in bytes, fair (first come, first served).

    A producer that would exceed the budget waits until enough bytes are released; that is
    the backpressure that bounds memory when many transfers run at once.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self._available = total
        self._waiters: deque[tuple[int, anyio.Event]] = deque()

    @property
    def available(self) -> int:
        return self._available

    async def acquire(self, n: int) -> int:
        """Take ``n`` bytes (at most the whole budget); returns what was taken, for release."""
        n = min(n, self.total)
        if not self._waiters and self._available >= n:
            self._available -= n
            return n
        event = anyio.Event()
        entry = (n, event)
        self._waiters.append(entry)
        try:
            await event.wait()
        except BaseException:
            if event.is_set():
                self.release(n)  # granted as we were cancelled: give it back
            else:
                self._waiters.remove(entry)
            raise
        return n

    def release(self, n: int) -> None:
        """Give back ``n`` bytes taken by :meth:`acquire` and wake waiters that now fit."""
        self._available += n
        while self._waiters and self._waiters[0][0] <= self._available:
            size, event = self._waiters.popleft()
            self._available -= size
            event.set()


class Limits:
    """The limits one store's operations share.

    Attributes:
        requests: request slots for small-object calls (``max_concurrency * 4``).
        budget: buffered bytes across all transfers.
        cpu: worker threads that hash (and read or write files) for this store.
    """

    def __init__(self, *, max_concurrency: int, buffer_bytes: int) -> None:
        self.requests = anyio.CapacityLimiter(max_concurrency * 4)
        self.budget = ByteBudget(buffer_bytes)
        self.cpu = anyio.CapacityLimiter(max(2, (os.cpu_count() or 2)))
