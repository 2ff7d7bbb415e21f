"""Store: the blocking facade over :class:`AsyncStore`, for synchronous code.

Every :class:`Store` of a process shares one event loop, run by an anyio blocking portal in a
daemon thread named ``astore-loop`` that starts on first use. Each public method hands the
matching :class:`AsyncStore` coroutine to that loop and blocks until it is done, so the sync
API has exactly the async API's behaviour (the policy lives in one place).

Lifecycle:
    The constructor builds the :class:`AsyncStore` (so a bad URL or option raises at once) but
    opens nothing. Sessions are opened on the loop thread by ``with`` or, without ``with``, by
    the first call; :meth:`Store.close` waits for background uploads and closes them.
Fork:
    A forked child has no loop thread. An at-fork hook drops the parent's loop; the first call
    in the child starts a fresh one, and a store inherited from the parent re-opens a fresh
    :class:`AsyncStore` (new clients) on it. The parent's sessions are never touched from the
    child. Background uploads started in the parent stay the parent's.
Interpreter exit:
    Stores still open are flushed with a bounded wait (``ASTORE_EXIT_TIMEOUT`` seconds, default
    60); anything that could not finish, and every error not yet reported, is logged on the
    ``astore`` logger. Children of ``multiprocessing`` (which leave by ``os._exit``) get the
    same treatment through a ``multiprocessing`` finaliser.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Self, TypeVar

import anyio
from anyio.from_thread import BlockingPortal

from ._backend import Buffer
from ._config import TransferConfig
from ._exceptions import ClosedError
from ._loop import (
    DEFAULT_EXIT_TIMEOUT,
    _BackgroundFuture,
    _Failure,
    _Loop,
    _pump,
    _receive_batch,
    _settle,
    _start_background,
    current_loop,
    inherit,
)
from ._progress import ProgressCallback
from ._retry import RetryPolicy
from ._source import Source
from ._store import AsyncStore, UploadHandle, open
from ._types import ObjectInfo, UploadInfo

__all__ = ["DEFAULT_EXIT_TIMEOUT", "Store", "open_sync"]

T = TypeVar("T")
log = logging.getLogger("astore")


def open_sync(
    url: str | os.PathLike[str],
    *,
    transfer: TransferConfig | None = None,
    retry: RetryPolicy | None = None,
    **options: Any,
) -> Store:
    """Open a store by URL for synchronous code; use the result with ``with`` (or close it).

    Args:
        url: as for :func:`astore.open`: a folder path, ``file:///path``, ``memory://NAME``,
            ``s3://BUCKET[/PREFIX]`` or ``gs://BUCKET[/PREFIX]``.
        transfer: part sizes, concurrency and memory budget (:class:`TransferConfig`).
        retry: the retry policy for every request (:class:`RetryPolicy`).
        **options: backend options, e.g. ``endpoint_url=`` for S3, ``fsync=False`` locally.

    Raises:
        ConfigurationError: the URL or an option is invalid, or the backend's extra is missing.

    Example:
        >>> with astore.open_sync("memory://demo") as store:
        ...     store.put("a.txt", b"hello")
        ...     store.get("a.txt")
        b'hello'
    """
    return Store(url, transfer=transfer, retry=retry, **options)


class Store:
    """An object store for synchronous code: the methods of :class:`AsyncStore`, blocking.

    Each method runs the :class:`AsyncStore` method of the same name on astore's private
    event-loop thread and waits for it, so it behaves identically (retries, limits,
    checksums). It may be called from any thread, from several at once, and from code that
    already runs an event loop (a Jupyter cell, a sync helper inside an async app); the
    calling thread blocks while the loop thread works.

    ``with`` opens the store's sessions and, on leaving, waits for background uploads and
    closes them (raising a failed upload's error). Without ``with`` the sessions open at the
    first call; call :meth:`close` when done, or interpreter exit flushes the store.

    Args:
        url, transfer, retry, **options: as for :func:`open_sync`.

    Raises:
        ConfigurationError: the URL or an option is invalid.

    Example:
        >>> with astore.open_sync("memory://demo") as store:
        ...     future = store.upload_in_background("metrics.json", "runs/7/metrics.json")
        ...     size = future.result().size
    """

    def __init__(
        self,
        url: str | os.PathLike[str],
        *,
        transfer: TransferConfig | None = None,
        retry: RetryPolicy | None = None,
        **options: Any,
    ) -> None:
        self._open_args = (url, transfer, retry, options)
        # Built here so a bad URL fails at once; nothing loop-bound happens until opened.
        self._astore = open(url, transfer=transfer, retry=retry, **options)
        self._loop: _Loop | None = None
        self._cm: AbstractContextManager[AsyncStore] | None = None
        self._closed = False
        self._pending: set[_BackgroundFuture] = set()

    # -- plumbing (the only logic of the facade) -------------------------------------------

    def _session(self) -> tuple[BlockingPortal, AsyncStore]:
        """The portal and the AsyncStore open on it, opening (or re-opening after fork)."""
        loop = current_loop()
        if self._loop is loop and not self._closed:
            return loop.portal(), self._astore
        with loop.lock_for(self):
            if self._closed:
                raise ClosedError(f"{self.url} is closed")
            if self._loop is not loop:
                if self._loop is not None:
                    # Inherited through fork: the parent's sessions belong to a loop that
                    # does not exist here, and closing them could disturb the parent's
                    # connections. Leave them and build fresh clients.
                    inherit((self._astore, self._cm))
                    url, transfer, retry, options = self._open_args
                    self._astore = open(url, transfer=transfer, retry=retry, **options)
                    self._pending = set()
                portal = loop.portal()
                # One task enters and exits the AsyncStore: its task group and cancel
                # scopes must not cross tasks.
                cm = portal.wrap_async_context_manager(self._astore)
                cm.__enter__()
                self._cm, self._loop = cm, loop
                with loop.lock:
                    loop.stores.add(self)
            return loop.portal(), self._astore

    def _call(self, fn: Callable[[AsyncStore], Awaitable[T]]) -> T:
        portal, astore = self._session()
        return portal.call(fn, astore)

    def _iterate(
        self, fn: Callable[[AsyncStore], AsyncIterator[T]], *, buffer: int, batch: int
    ) -> Iterator[T]:
        portal, astore = self._session()
        loop = current_loop()
        send, receive = anyio.create_memory_object_stream[T | _Failure](buffer)
        pump = portal.start_task_soon(_pump, fn(astore), send)
        try:
            while items := portal.call(_receive_batch, receive, batch):
                for item in items:
                    if isinstance(item, _Failure):
                        raise item.error
                    yield item
        finally:
            # Also on break or garbage collection: stop the producer, which closes the
            # async generator (releasing its connection) before we return.
            if current_loop() is loop and not loop._stopped:
                portal.call(receive.aclose)
                pump.result()

    def _background(self, fn: Callable[[AsyncStore], UploadHandle]) -> Future[ObjectInfo]:
        portal, astore = self._session()
        handle = portal.call(_start_background, fn, astore)
        future = _BackgroundFuture(handle, self.url)
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        portal.start_task_soon(_settle, handle, future)
        return future

    def _close(self) -> None:
        loop = current_loop()
        with loop.lock_for(self):
            if self._closed:
                return
            self._closed = True
            cm, opened_here = self._cm, self._loop is loop
            self._cm = None
            with loop.lock:
                loop.stores.discard(self)
        if cm is not None and opened_here:
            cm.__exit__(None, None, None)
        elif cm is not None:
            inherit(cm)  # a parent's session, seen from a forked child

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The store's URL (no credentials), e.g. ``s3://bucket/prefix``."""
        return self._astore.url

    @property
    def stats(self) -> dict[str, int]:
        """Counters: ``retries`` (requests retried so far)."""
        return self._astore.stats

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._loop is current_loop() else "unopened"
        return f"<Store {self.url} {state}>"

    def __enter__(self) -> Self:
        self._session()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Wait for background uploads, then close the store's sessions. Idempotent.

        Raises:
            The error of a failed background upload not retrieved from its Future (an
            ExceptionGroup if several failed).

        Example:
            >>> store = astore.open_sync("memory://demo"); store.put("k", b"v"); store.close()
        """
        self._close()

    # -- writes ----------------------------------------------------------------------------

    def put(
        self,
        key: str,
        data: Buffer,
        *,
        if_not_exists: bool = False,
        content_type: str | None = None,
        progress: ProgressCallback | None = None,
        retry: RetryPolicy | None = None,
    ) -> ObjectInfo:
        """Store ``data`` under ``key`` atomically (blocking :meth:`AsyncStore.put`).

        Args:
            key: the object's key.
            data: ``bytes``, ``bytearray`` or ``memoryview``.
            if_not_exists: fail with :class:`AlreadyExistsError` if the key exists.
            content_type: stored with the object where the service keeps it.
            progress: ``callback(bytes_done, bytes_total)``, called on astore's loop thread.
            retry: a policy for this call instead of the store's.

        Raises:
            InvalidKeyError, AlreadyExistsError, the last transient error when retries run out.

        Example:
            >>> store.put("a.txt", b"hello").size
            5
        """
        return self._call(
            lambda s: s.put(
                key,
                data,
                if_not_exists=if_not_exists,
                content_type=content_type,
                progress=progress,
                retry=retry,
            )
        )

    def upload(
        self,
        source: Source,
        key: str,
        *,
        if_not_exists: bool = False,
        content_type: str | None = None,
        progress: ProgressCallback | None = None,
        retry: RetryPolicy | None = None,
    ) -> ObjectInfo:
        """Upload a file, file object or async iterable, streamed (:meth:`AsyncStore.upload`).

        Args:
            source: a path, a file object opened ``"rb"`` (not closed), or an async iterable.
            key: the object's key.
            if_not_exists, content_type, progress, retry: as for :meth:`put`.

        Raises:
            InvalidKeyError, AlreadyExistsError, TypeError (unsupported source),
            FileNotFoundError, the last transient error when retries run out.

        Example:
            >>> store.upload("ckpt.pt", "runs/7/ckpt.pt")
        """
        return self._call(
            lambda s: s.upload(
                source,
                key,
                if_not_exists=if_not_exists,
                content_type=content_type,
                progress=progress,
                retry=retry,
            )
        )

    # -- reads -----------------------------------------------------------------------------

    def get(
        self,
        key: str,
        *,
        range: tuple[int, int] | None = None,
        progress: ProgressCallback | None = None,
        retry: RetryPolicy | None = None,
    ) -> bytes:
        """Read a whole object (verified) or a byte range (:meth:`AsyncStore.get`).

        Args:
            key: the object's key.
            range: ``(start, end)``, half-open like a slice.
            progress, retry: as for :meth:`put`.

        Raises:
            NotFoundError, InvalidRangeError, IntegrityError.

        Example:
            >>> store.get("a.txt", range=(0, 2))
            b'he'
        """
        return self._call(lambda s: s.get(key, range=range, progress=progress, retry=retry))

    def iter_bytes(
        self,
        key: str,
        *,
        start: int = 0,
        end: int | None = None,
        chunk_size: int | None = None,
        retry: RetryPolicy | None = None,
    ) -> Iterator[bytes]:
        """Stream an object's bytes ``[start, end)`` chunk by chunk (:meth:`AsyncStore.iter_bytes`).

        Chunks are fetched as you iterate (one chunk ahead); breaking out of the loop closes
        the stream.

        Args:
            key: the object's key.
            start, end: the byte range, half-open; ``end=None`` reads to the end.
            chunk_size: bytes per chunk (default ``TransferConfig.chunk_size``).
            retry: as for :meth:`put`.

        Raises:
            NotFoundError, InvalidRangeError, PreconditionFailedError, IntegrityError.

        Example:
            >>> with open("big.bin", "wb") as f:
            ...     for chunk in store.iter_bytes("big.bin"):
            ...         f.write(chunk)
        """
        return self._iterate(
            lambda s: s.iter_bytes(key, start=start, end=end, chunk_size=chunk_size, retry=retry),
            buffer=1,
            batch=1,
        )

    def download(
        self,
        key: str,
        dest: str | os.PathLike[str],
        *,
        progress: ProgressCallback | None = None,
        retry: RetryPolicy | None = None,
    ) -> ObjectInfo:
        """Download an object to the file ``dest``, atomically and verified.

        Args:
            key: the object's key.
            dest: the file to write (replaced only once the download is verified).
            progress, retry: as for :meth:`put`.

        Raises:
            NotFoundError, IntegrityError, PreconditionFailedError, OSError.

        Example:
            >>> store.download("runs/7/ckpt.pt", "ckpt.pt")
        """
        return self._call(lambda s: s.download(key, dest, progress=progress, retry=retry))

    def stat(self, key: str, *, retry: RetryPolicy | None = None) -> ObjectInfo:
        """Metadata of one object: size, etag, last_modified, checksums, version.

        Args:
            key: the object's key.
            retry: as for :meth:`put`.

        Raises:
            NotFoundError: no such object.

        Example:
            >>> store.stat("a.txt").size
            5
        """
        return self._call(lambda s: s.stat(key, retry=retry))

    def exists(self, key: str, *, retry: RetryPolicy | None = None) -> bool:
        """Whether an object exists under ``key``.

        Args:
            key: the object's key.
            retry: as for :meth:`put`.

        Raises:
            InvalidKeyError, the last transient error when retries run out.

        Example:
            >>> store.exists("a.txt")
            True
        """
        return self._call(lambda s: s.exists(key, retry=retry))

    def list(
        self,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        page_size: int = 1000,
        retry: RetryPolicy | None = None,
    ) -> Iterator[ObjectInfo]:
        """Iterate over the objects under ``prefix`` in key order (:meth:`AsyncStore.list`).

        Pages are fetched as you iterate (one page ahead); nothing is materialised, and
        breaking out of the loop stops the listing.

        Args:
            prefix: only keys starting with it.
            delimiter: roll keys up into common prefixes (``ObjectInfo(is_prefix=True)``).
            page_size: objects per request, 1 to 1000.
            retry: as for :meth:`put`.

        Raises:
            InvalidKeyError (bad prefix), ValueError (bad delimiter or page_size).

        Example:
            >>> [info.key for info in store.list("runs/7/", delimiter="/")]
        """
        return self._iterate(
            lambda s: s.list(prefix, delimiter=delimiter, page_size=page_size, retry=retry),
            buffer=page_size,
            batch=page_size,
        )

    # -- deletes and copies ----------------------------------------------------------------

    def delete(self, key: str, *, retry: RetryPolicy | None = None) -> None:
        """Delete one object; deleting a missing key is not an error.

        Args:
            key: the object's key.
            retry: as for :meth:`put`.

        Raises:
            InvalidKeyError, PermissionDeniedError.

        Example:
            >>> store.delete("a.txt")
        """
        return self._call(lambda s: s.delete(key, retry=retry))

    def delete_many(self, keys: Iterable[str], *, retry: RetryPolicy | None = None) -> None:
        """Delete many objects in batches; all keys are validated first.

        Args:
            keys: the keys to delete (missing ones are not errors).
            retry: as for :meth:`put`.

        Raises:
            InvalidKeyError before any deletion; an ExceptionGroup of per-key errors.

        Example:
            >>> store.delete_many(["a.txt", "b.txt"])
        """
        return self._call(lambda s: s.delete_many(keys, retry=retry))

    def copy(
        self,
        src: str,
        dst: str,
        *,
        if_not_exists: bool = False,
        retry: RetryPolicy | None = None,
    ) -> ObjectInfo:
        """Copy an object within the store, on the service's side.

        Args:
            src: the key to copy.
            dst: the new key.
            if_not_exists: fail with :class:`AlreadyExistsError` if ``dst`` exists.
            retry: as for :meth:`put`.

        Raises:
            NotFoundError (``src`` missing), AlreadyExistsError (``if_not_exists``).

        Example:
            >>> store.copy("a.txt", "b.txt").key
            'b.txt'
        """
        return self._call(lambda s: s.copy(src, dst, if_not_exists=if_not_exists, retry=retry))

    def url_for(self, key: str) -> str:
        """The full URL of ``key``, e.g. ``s3://bucket/prefix/key`` (no I/O, no session).

        Args:
            key: the object's key.

        Raises:
            InvalidKeyError: the key is not valid.

        Example:
            >>> astore.open_sync("memory://demo").url_for("a.txt")
            'memory://demo/a.txt'
        """
        return self._astore.url_for(key)

    def signed_url(self, key: str, *, method: str = "GET", expires: float = 3600) -> str:
        """A URL granting ``method`` on ``key`` for ``expires`` seconds; treat it as a secret.

        Args:
            key: the object's key.
            method: ``"GET"`` or ``"PUT"``.
            expires: validity in seconds, up to 7 days.

        Raises:
            UnsupportedOperationError: the store cannot sign URLs (memory, local).

        Example:
            >>> store.signed_url("a.txt", expires=600)
        """
        return self._call(lambda s: s.signed_url(key, method=method, expires=expires))

    def list_uploads(self, prefix: str = "") -> Iterator[UploadInfo]:
        """Iterate over multipart uploads under ``prefix`` never completed nor aborted.

        Their parts cost storage on S3 until aborted (see :meth:`abort_uploads`).

        Args:
            prefix: only uploads of keys starting with it.

        Raises:
            InvalidKeyError: a bad prefix.

        Example:
            >>> [u.key for u in store.list_uploads("runs/")]
        """
        return self._iterate(lambda s: s.list_uploads(prefix), buffer=100, batch=100)

    def abort_uploads(self, *, older_than: float = 86400.0, prefix: str = "") -> int:
        """Abort incomplete multipart uploads under ``prefix`` older than ``older_than`` s.

        Args:
            older_than: only uploads started at least this many seconds ago.
            prefix: only uploads of keys starting with it.

        Returns:
            How many uploads were aborted.

        Raises:
            ValueError: a negative ``older_than``.

        Example:
            >>> store.abort_uploads(older_than=3600)
            0
        """
        return self._call(lambda s: s.abort_uploads(older_than=older_than, prefix=prefix))

    # -- background uploads ----------------------------------------------------------------

    def upload_in_background(
        self,
        source: Source,
        key: str,
        *,
        if_not_exists: bool = False,
        content_type: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> Future[ObjectInfo]:
        """Start :meth:`upload` in the background; returns a ``concurrent.futures.Future``.

        The Future's ``result()`` is the uploaded object's :class:`ObjectInfo` or raises the
        upload's error. An error not read from its Future is raised by :meth:`flush` or on
        leaving ``with`` (and logged at interpreter exit), so it is never lost. The upload
        cannot be cancelled through the Future.

        Args:
            source: a path or file object (read on astore's loop thread while it uploads:
                do not modify it until the Future is done), or an async iterable.
            key: the object's key.
            if_not_exists, content_type, retry: as for :meth:`put`.

        Raises:
            InvalidKeyError, ClosedError: at once, before anything starts.

        Example:
            >>> future = store.upload_in_background("metrics.json", "runs/7/metrics.json")
            >>> future.result().key
            'runs/7/metrics.json'
        """
        return self._background(
            lambda s: s.upload_in_background(
                source, key, if_not_exists=if_not_exists, content_type=content_type, retry=retry
            )
        )

    def flush(self) -> None:
        """Wait for every background upload started so far.

        Raises:
            The failed uploads' errors not yet read from their Futures: the error itself if
            one failed, an ExceptionGroup if several did.

        Example:
            >>> store.flush()
        """
        return self._call(lambda s: s.flush())
