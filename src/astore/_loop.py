"""The process-wide event-loop thread behind every sync :class:`~astore.Store`.

One daemon thread named ``astore-loop`` runs an anyio blocking portal, started on first use.
An at-fork hook replaces it in a forked child (the thread does not exist there); at interpreter
exit, and at a ``multiprocessing`` child's exit, open stores are flushed with a bounded wait.
Also here: the Future of a background upload and the helpers that turn async iterators into
sync ones, one task per iterator.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import os
import sys
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, TypeVar

import anyio
from anyio.abc import ObjectSendStream
from anyio.from_thread import BlockingPortal, start_blocking_portal
from anyio.streams.memory import MemoryObjectReceiveStream

from ._exceptions import ClosedError
from ._store import AsyncStore, UploadHandle
from ._types import ObjectInfo

if TYPE_CHECKING:
    from ._sync import Store

__all__ = ["DEFAULT_EXIT_TIMEOUT", "current_loop", "inherit"]

T = TypeVar("T")
log = logging.getLogger("astore")

DEFAULT_EXIT_TIMEOUT = 60.0
"""Seconds that interpreter exit waits for background uploads (env ``ASTORE_EXIT_TIMEOUT``)."""


def _exit_timeout() -> float:
    raw = os.environ.get("ASTORE_EXIT_TIMEOUT")
    if raw is None:
        return DEFAULT_EXIT_TIMEOUT
    try:
        return max(0.0, float(raw))
    except ValueError:
        log.warning("ignoring ASTORE_EXIT_TIMEOUT=%r (not a number of seconds)", raw)
        return DEFAULT_EXIT_TIMEOUT


class _Loop:
    """The process's event-loop thread: started on first use, replaced in a forked child."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.stores: set[Store] = set()  # open on this loop; strong refs so exit can flush them
        self._portal: BlockingPortal | None = None
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._store_locks: weakref.WeakKeyDictionary[Store, threading.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._stopped = False

    def portal(self) -> BlockingPortal:
        portal = self._portal
        if portal is not None:
            return portal
        with self.lock:
            if self._portal is None:
                if self._stopped:
                    raise ClosedError("astore's event loop has shut down (interpreter exit)")
                cm = start_blocking_portal(name="astore-loop")
                self._portal = cm.__enter__()
                self._portal_cm = cm
                _register_child_exit_hook()
            return self._portal

    def lock_for(self, store: Store) -> threading.Lock:
        # Per-store locks live here, not on the store, so a forked child (new _Loop) never
        # inherits one that a parent thread held at the moment of the fork.
        with self.lock:
            lock = self._store_locks.get(store)
            if lock is None:
                lock = self._store_locks[store] = threading.Lock()
            return lock

    def shutdown(self, timeout: float) -> None:
        """Flush every open store (waiting at most ``timeout`` s), log what failed, stop."""
        if self._portal is None or self._stopped or self.pid != os.getpid():
            return
        with self.lock:
            stores = sorted(self.stores, key=lambda s: s.url)
        pending = [f for s in stores for f in s._pending.copy()]
        wait_futures(pending, timeout=timeout)
        not_done = [f for f in pending if not f.done()]
        if not_done:
            names = ", ".join(sorted(f"{f.store_url}/{f.key}" for f in not_done))
            log.error(
                "astore: %d background upload(s) did not finish within %.1f s of interpreter "
                "exit and were abandoned: %s",
                len(not_done),
                timeout,
                names,
            )
        for store in stores:
            if any(f in not_done for f in store._pending.copy()):
                continue
            try:
                store.close()
            except Exception as exc:
                for error in _leaves(exc):
                    log.error("astore: background upload to %s failed: %s", store.url, error)
        if not not_done:
            self._stop()

    def _stop(self) -> None:
        with self.lock:
            self._stopped = True
            cm, self._portal, self._portal_cm = self._portal_cm, None, None
        if cm is not None:
            cm.__exit__(None, None, None)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


_LOOP = _Loop()
_child_hook_registered = False
# What a forked child inherited from its parent's loop, kept alive and never finalised: the
# portal's generator would try to stop a loop thread that does not exist here (and hang), and
# the parent's clients would close connections the parent still uses.
_inherited: list[object] = []


def _after_fork_in_child() -> None:
    # The loop thread does not exist in the child and its locks may be held forever; start
    # from nothing. Stores notice the new _Loop and re-open themselves on first use.
    global _LOOP, _child_hook_registered
    _inherited.append(_LOOP)
    _LOOP = _Loop()
    _child_hook_registered = False


def _flush_at_exit() -> None:
    _LOOP.shutdown(_exit_timeout())


def _register_child_exit_hook() -> None:
    """In a multiprocessing child, flush at its exit too: it leaves by ``os._exit``."""
    global _child_hook_registered
    mp = sys.modules.get("multiprocessing")
    if _child_hook_registered or mp is None or mp.parent_process() is None:
        return
    import multiprocessing.util

    multiprocessing.util.Finalize(None, _flush_at_exit, exitpriority=10)
    _child_hook_registered = True


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_flush_at_exit)


class _BackgroundFuture(Future[ObjectInfo]):
    """The Future of a background upload; reading its outcome counts as retrieving it."""

    def __init__(self, handle: UploadHandle, store_url: str) -> None:
        super().__init__()
        self.key = handle.key
        self.store_url = store_url
        self._handle = handle
        # Running from the start: the upload cannot be withdrawn through cancel().
        self.set_running_or_notify_cancel()

    def result(self, timeout: float | None = None) -> ObjectInfo:
        try:
            return super().result(timeout)
        finally:
            self._mark_retrieved()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            return super().exception(timeout)
        finally:
            self._mark_retrieved()

    def _mark_retrieved(self) -> None:
        # Same rule as UploadHandle.wait(): an error you have seen is not raised again by
        # flush()/close().
        if self.done():
            self._handle.mark_retrieved()


async def _start_background(
    fn: Callable[[AsyncStore], UploadHandle], astore: AsyncStore
) -> UploadHandle:
    # A coroutine, because the portal would await an awaitable result such as the handle.
    return fn(astore)


async def _settle(handle: UploadHandle, future: _BackgroundFuture) -> None:
    # retrieve=False: the error counts as seen only once the caller reads the Future.
    try:
        result = await handle.wait(retrieve=False)
    except Exception as exc:
        future.set_exception(exc)
    else:
        future.set_result(result)


@dataclasses.dataclass(frozen=True, slots=True)
class _Failure:
    error: Exception


async def _pump(items: AsyncIterator[T], send: ObjectSendStream[T | _Failure]) -> None:
    """Drive an async iterator in one task (cancel scopes inside it must stay in one task)."""
    async with send:
        try:
            async for item in items:
                await send.send(item)
        except anyio.BrokenResourceError:
            pass  # the consumer stopped early
        except Exception as exc:
            with contextlib.suppress(anyio.BrokenResourceError):
                await send.send(_Failure(exc))
        finally:
            aclose = getattr(items, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()


async def _receive_batch(receive: MemoryObjectReceiveStream[T], limit: int) -> list[T]:
    try:
        batch = [await receive.receive()]
    except anyio.EndOfStream:
        return []
    while len(batch) < limit:
        try:
            batch.append(receive.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream):
            break
    return batch


def current_loop() -> _Loop:
    """This process's loop (a forked child gets a new one)."""
    return _LOOP


def inherit(obj: object) -> None:
    """Keep ``obj`` (a parent's session, seen from a forked child) alive and never finalised."""
    _inherited.append(obj)
