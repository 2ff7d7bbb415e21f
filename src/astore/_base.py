"""The store's state, lifecycle and request plumbing, shared by its reads and writes."""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Self, TypeVar

import anyio

from ._backend import Backend
from ._config import TransferConfig
from ._exceptions import ClosedError, ObjectError
from ._keys import check_key, join_key
from ._limits import Limits
from ._retry import DEFAULT_RETRY, RetryPolicy, retry_call
from ._types import ObjectInfo

__all__ = ["StoreBase", "UploadHandle"]

T = TypeVar("T")
log = logging.getLogger("astore")


class _State(enum.Enum):
    UNOPENED = 1
    OPEN = 2
    CLOSED = 3


class UploadHandle:
    """A background upload started by :meth:`AsyncStore.upload_in_background`.

    Await it (or :meth:`wait`) for the uploaded object's :class:`ObjectInfo`; the upload's
    error, if any, is raised there (and again when the store is flushed or closed, unless it
    was retrieved).
    """

    def __init__(self, key: str) -> None:
        self.key = key
        self._done = anyio.Event()
        self._result: ObjectInfo | None = None
        self._error: BaseException | None = None
        self._retrieved = False

    def done(self) -> bool:
        """Whether the upload has finished, successfully or not."""
        return self._done.is_set()

    async def wait(self, *, retrieve: bool = True) -> ObjectInfo:
        """Wait for the upload; returns its ObjectInfo or raises its error.

        Args:
            retrieve: count a raised error as seen, so that :meth:`AsyncStore.flush` and
                closing the store do not raise it again. Pass ``False`` to hand the outcome
                on (e.g. to a Future) and call :meth:`mark_retrieved` when it is read.
        """
        await self._done.wait()
        if retrieve:
            self._retrieved = True
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def mark_retrieved(self) -> None:
        """Count the upload's error as seen (flush and close will not raise it again)."""
        self._retrieved = True

    def __await__(self) -> Any:
        return self.wait().__await__()


class StoreBase:
    """State and plumbing of :class:`~astore.AsyncStore` (see there for the API)."""

    def __init__(
        self,
        backend: Backend,
        *,
        prefix: str = "",
        transfer: TransferConfig | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.backend = backend
        self.prefix = prefix
        self.transfer = transfer or TransferConfig()
        self.retry = retry or DEFAULT_RETRY
        self.limits = Limits(
            max_concurrency=self.transfer.max_concurrency,
            buffer_bytes=self.transfer.buffer_budget,
        )
        self._state = _State.UNOPENED
        self._retries = 0
        self._background: set[UploadHandle] = set()
        self._task_group: anyio.abc.TaskGroup | None = None

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The store's URL (no credentials), e.g. ``s3://bucket/prefix``."""
        base = self.backend.url
        return f"{base}/{self.prefix}" if self.prefix else base

    @property
    def stats(self) -> dict[str, int]:
        """Counters: ``retries`` (requests retried so far)."""
        return {"retries": self._retries}

    def __repr__(self) -> str:
        return f"<AsyncStore {self.url} {self._state.name.lower()}>"

    async def __aenter__(self) -> Self:
        if self._state is not _State.UNOPENED:
            raise ClosedError(f"{self.url}: a store can be opened only once")
        await self.backend.open()
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        self._state = _State.OPEN
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Wait for background uploads, then close the store's connections.

        Raises:
            The error of a failed background upload (an ExceptionGroup if several failed)
            that was not retrieved from its handle.
        """
        if self._state is not _State.OPEN:
            self._state = _State.CLOSED
            return
        try:
            await self.flush()
        finally:
            self._state = _State.CLOSED
            assert self._task_group is not None
            await self._task_group.__aexit__(None, None, None)
            await self.backend.close()

    def _check_open(self) -> None:
        if self._state is not _State.OPEN:
            what = "closed" if self._state is _State.CLOSED else "not open (use 'async with')"
            raise ClosedError(f"{self.url} is {what}")

    def _count_retry(self, *_: object) -> None:
        self._retries += 1

    async def _call(
        self,
        fn: Callable[[], Awaitable[T]],
        *,
        operation: str,
        key: str | None,
        policy: RetryPolicy | None = None,
    ) -> T:
        """Run one backend request under the retry policy and the store's request slots."""

        async def limited() -> T:
            async with self.limits.requests:
                try:
                    return await fn()
                except ObjectError as exc:
                    # Name the call the user made ("stat"), not the primitive ("head").
                    exc.operation = operation
                    raise

        return await retry_call(
            policy or self.retry,
            limited,
            operation=operation,
            key=key,
            store=self.url,
            on_retry=self._count_retry,
        )

    async def _head(self, full: str, operation: str, policy: RetryPolicy) -> ObjectInfo:
        return await self._call(
            lambda: self.backend.head(full), operation=operation, key=full, policy=policy
        )

    def _key(self, key: object, operation: str) -> str:
        self._check_open()
        return join_key(self.prefix, check_key(key, store=self.url, operation=operation))

    def _relative(self, info: ObjectInfo, key: str) -> ObjectInfo:
        return dataclasses.replace(info, key=key)

    def _strip(self, full: str) -> str:
        return full[len(self.prefix) + 1 :] if self.prefix else full

    async def flush(self) -> None:
        """Wait for every background upload started so far.

        Raises:
            The failed uploads' errors not yet retrieved from their handles: the error
            itself if one failed, an ExceptionGroup if several did.
        """
        pending = list(self._background)
        for handle in pending:
            await handle._done.wait()
        self._background.difference_update(pending)
        errors = [h._error for h in pending if h._error is not None and not h._retrieved]
        excs = [e for e in errors if isinstance(e, Exception)]
        if len(excs) == 1:
            raise excs[0]
        if excs:
            raise ExceptionGroup(f"{len(excs)} background uploads failed", excs)
