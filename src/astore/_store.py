"""AsyncStore: the asyncio API, and the only place where transfer policy lives."""

from __future__ import annotations

import contextlib
import enum
import functools
import logging
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import anyio
import anyio.to_thread

from ._backend import Backend, Buffer
from ._checksum import ObjectDigest, pick_algorithm
from ._config import TransferConfig
from ._exceptions import (
    ClosedError,
    IntegrityError,
    InvalidRangeError,
    NotFoundError,
    ObjectError,
)
from ._keys import check_key, check_prefix, join_key
from ._limits import Limits
from ._progress import Progress, ProgressCallback
from ._retry import DEFAULT_RETRY, RetryPolicy, retry_call
from ._source import BufferSource, PartSource, Source, open_source
from ._transfer import conditional, download_to_fd, first_error, multipart_upload, read_stream
from ._types import ObjectInfo, UploadInfo
from ._url import make_backend, parse_url

__all__ = ["AsyncStore", "UploadHandle", "open"]

T = TypeVar("T")
log = logging.getLogger("astore")
DELETE_BATCH = 1000


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

    async def wait(self) -> ObjectInfo:
        """Wait for the upload; returns its ObjectInfo or raises its error."""
        await self._done.wait()
        self._retrieved = True
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def __await__(self) -> Any:
        return self.wait().__await__()


def open(
    url: str | os.PathLike[str],
    *,
    transfer: TransferConfig | None = None,
    retry: RetryPolicy | None = None,
    **options: Any,
) -> AsyncStore:
    """Open a store by URL; use the result with ``async with``.

    Args:
        url: a folder path or ``file:///path`` (local store), ``memory://NAME[/PREFIX]``,
            ``s3://BUCKET[/PREFIX]`` or ``gs://BUCKET[/PREFIX]``. A store opened on a prefix
            sees keys relative to it.
        transfer: part sizes, concurrency and memory budget (:class:`TransferConfig`).
        retry: the retry policy for every request (:class:`RetryPolicy`).
        **options: backend options, e.g. ``endpoint_url=`` and ``region=`` for S3,
            ``fsync=False`` for a local store.

    Raises:
        ConfigurationError: the URL or an option is invalid, or the backend's extra is missing.

    Example:
        >>> async def main():
        ...     async with astore.open("memory://demo") as store:
        ...         await store.put("a.txt", b"hello")
        ...         return await store.get("a.txt")
    """
    transfer = transfer or TransferConfig()
    scheme, container, prefix = parse_url(url if isinstance(url, str | Path) else os.fspath(url))
    if prefix:
        prefix = check_prefix(prefix + "/").rstrip("/")
    backend = make_backend(scheme, container, options, max_connections=transfer.max_concurrency * 4)
    return AsyncStore(backend, prefix=prefix, transfer=transfer, retry=retry or DEFAULT_RETRY)


class AsyncStore:
    """An object store, used from asyncio: ``async with astore.open(url) as store``.

    Every call validates its arguments before any I/O, runs its requests under the store's
    retry policy and limits, and checksums what it writes (CRC32C by default, off the event
    loop) so that every read can be verified. Leaving the ``async with`` block waits for
    background uploads and closes the backend's connections.
    """

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
                return await fn()

        return await retry_call(
            policy or self.retry,
            limited,
            operation=operation,
            key=key,
            store=self.url,
            on_retry=self._count_retry,
        )

    def _key(self, key: object, operation: str) -> str:
        self._check_open()
        return join_key(self.prefix, check_key(key, store=self.url, operation=operation))

    def _relative(self, info: ObjectInfo, key: str) -> ObjectInfo:
        return ObjectInfo(
            key=key,
            size=info.size,
            etag=info.etag,
            last_modified=info.last_modified,
            checksums=info.checksums,
            version=info.version,
            content_type=info.content_type,
            is_prefix=info.is_prefix,
        )

    def _strip(self, full: str) -> str:
        return full[len(self.prefix) + 1 :] if self.prefix else full

    # -- writes --------------------------------------------------------------------------

    async def put(
        self,
        key: str,
        data: Buffer,
        *,
        if_not_exists: bool = False,
        content_type: str | None = None,
        progress: ProgressCallback | None = None,
        retry: RetryPolicy | None = None,
    ) -> ObjectInfo:
        """Store ``data`` under ``key`` (atomically: readers see the old or the new object).

        Data of at least ``multipart_threshold`` bytes goes as a multipart upload of
        ``memoryview`` slices (no copy).

        Args:
            key: the object's key.
            data: ``bytes``, ``bytearray`` or ``memoryview``.
            if_not_exists: fail with :class:`AlreadyExistsError` if the key exists; two
                concurrent creators: exactly one wins.
            content_type: stored with the object where the service keeps it.
            progress: ``callback(bytes_done, bytes_total)``, called at most every 0.1 s.
            retry: a policy for this call instead of the store's.

        Raises:
            InvalidKeyError, AlreadyExistsError, TypeError (``data`` not bytes-like).
        """
        full = self._key(key, "put")
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"put() takes bytes-like data, not {type(data).__name__}")
        view = memoryview(data).cast("B")
        policy = retry or self.retry
        meter = Progress(progress, len(view))
        cfg = self.transfer
        if len(view) >= cfg.multipart_threshold:
            info = await self._upload_source(
                BufferSource(view), full, if_not_exists, content_type, meter, policy
            )
        else:
            info = await self._put_small(full, view, if_not_exists, content_type, policy)
            meter.advance(len(view))
        meter.finish()
        return self._relative(info, key)

    async def _put_small(
        self,
        full: str,
        data: memoryview,
        if_not_exists: bool,
        content_type: str | None,
        policy: RetryPolicy,
    ) -> ObjectInfo:
        digest = ObjectDigest(self.transfer.checksum)
        if len(data) >= 256 * 1024:
            await anyio.to_thread.run_sync(digest.part, data, limiter=self.limits.cpu)
        else:
            digest.part(data)
        checksums = digest.whole()
        return await conditional(
            self,
            lambda: self.backend.put_object(
                full,
                data,
                if_not_exists=if_not_exists,
                checksums=checksums,
                content_type=content_type,
            ),
            key=full,
            size=len(data),
            checksums=checksums,
            policy=policy,
            operation="put",
        )

    async def upload(
        self,
        source: Source,
        key: str,
        *,
        if_not_exists: bool = False,
        content_type: str | None = None,
        progress: ProgressCallback | None = None,
        retry: RetryPolicy | None = None,
    ) -> ObjectInfo:
        """Upload a file, a binary file object or an async iterator of bytes to ``key``.

        The source is streamed: at most ``part_size * max_concurrency`` bytes of it are in
        memory at once. Sources of at least ``multipart_threshold`` bytes (or of unknown size
        and more than one part) go as a multipart upload whose parts are checksummed while
        earlier ones upload; on any failure or cancellation the upload is aborted and
        nothing appears under ``key``.

        Args:
            source: a path, a file object opened ``"rb"`` (read from its current position;
                not closed), or an async iterable of bytes.
            key: the object's key.
            if_not_exists, content_type, progress, retry: as for :meth:`put`.

        Raises:
            InvalidKeyError, AlreadyExistsError, TypeError (unsupported source),
            FileNotFoundError (a path that does not exist), the last transient error when
            retries run out.

        Example:
            >>> await store.upload("ckpt.pt", "runs/7/ckpt.pt")
        """
        full = self._key(key, "upload")
        policy = retry or self.retry
        if isinstance(source, bytes | bytearray | memoryview):
            raise TypeError("upload() streams files and iterators; use put() for bytes")
        src = await open_source(source)
        try:
            meter = Progress(progress, src.size)
            info = await self._upload_source(src, full, if_not_exists, content_type, meter, policy)
        finally:
            with anyio.CancelScope(shield=True):
                await src.aclose()
        meter.finish()
        return self._relative(info, key)

    async def _upload_source(
        self,
        src: PartSource,
        full: str,
        if_not_exists: bool,
        content_type: str | None,
        meter: Progress,
        policy: RetryPolicy,
    ) -> ObjectInfo:
        cfg = self.transfer
        caps = self.backend.capabilities
        digest = ObjectDigest(cfg.checksum)
        size: int | None = src.size
        part_size = _plan_part_size(cfg.part_size, size, caps)
        budget = self.limits.budget
        # Objects known to be small go in one request; otherwise the first part tells.
        single = size is not None and size < cfg.multipart_threshold
        first_size = size if single and size is not None else part_size
        taken = await budget.acquire(first_size)
        try:
            data, checksums = await src.read(first_size, digest.part, self.limits.cpu)
        except BaseException:
            budget.release(taken)
            raise
        if single or len(data) < part_size:
            try:
                whole = digest.whole()
                info = await conditional(
                    self,
                    lambda: self.backend.put_object(
                        full,
                        data,
                        if_not_exists=if_not_exists,
                        checksums=whole,
                        content_type=content_type,
                    ),
                    key=full,
                    size=len(data),
                    checksums=whole,
                    policy=policy,
                    operation="upload",
                )
            finally:
                budget.release(taken)
            meter.advance(len(data))
            return info
        return await multipart_upload(
            self,
            src,
            full,
            part_size=part_size,
            digest=digest,
            first=(data, checksums, taken),
            if_not_exists=if_not_exists,
            content_type=content_type,
            progress=meter,
            policy=policy,
        )

    # -- reads ---------------------------------------------------------------------------

    async def _head(self, full: str, operation: str, policy: RetryPolicy) -> ObjectInfo:
        return await self._call(
            lambda: self.backend.head(full), operation=operation, key=full, policy=policy
        )

    def _check_range(
        self, full: str, start: int, end: int | None, size: int, operation: str
    ) -> int:
        stop = size if end is None else end
        if start > size or stop > size:
            raise InvalidRangeError(
                f"range [{start}, {stop}) lies outside the object's {size} bytes",
                key=full,
                store=self.backend.url,
                operation=operation,
            )
        return stop

    async def get(
        self,
        key: str,
        *,
        range: tuple[int, int] | None = None,
        progress: ProgressCallback | None = None,
        retry: RetryPolicy | None = None,
    ) -> bytes:
        """Read a whole object (verified against its recorded checksum) or a byte range.

        Args:
            key: the object's key.
            range: ``(start, end)``, half-open like a slice: bytes ``start`` to ``end - 1``.
                ``start == end`` reads nothing. Ranges are not verified (a checksum covers
                the whole object).
            progress, retry: as for :meth:`put`.

        Raises:
            NotFoundError, InvalidRangeError (outside the object), IntegrityError.
        """
        full = self._key(key, "get")
        start, end = _validate_range(range, full, self.url)
        policy = retry or self.retry
        info = await self._head(full, "get", policy)
        stop = self._check_range(full, start, end, info.size, "get")
        meter = Progress(progress, stop - start)
        chunks: list[bytes] = []
        async for chunk in read_stream(
            self,
            full,
            start,
            stop,
            etag=info.etag,
            chunk_size=self.transfer.chunk_size,
            policy=policy,
        ):
            chunks.append(chunk)
            meter.advance(len(chunk))
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if range is None:
            await self._verify(info, data)
        meter.finish()
        return data

    async def _verify(self, info: ObjectInfo, data: bytes) -> None:
        algorithm = pick_algorithm(info.checksums, self.transfer.checksum)
        if algorithm is None:
            return
        digest = ObjectDigest(algorithm)
        if len(data) >= 256 * 1024:
            await anyio.to_thread.run_sync(digest.part, data, limiter=self.limits.cpu)
        else:
            digest.part(data)
        actual = digest.whole()[algorithm]
        if actual != info.checksums[algorithm]:
            raise IntegrityError(
                f"{algorithm} of the bytes read ({actual}) does not match the recorded "
                f"{info.checksums[algorithm]}",
                key=info.key,
                store=self.backend.url,
                operation="get",
            )

    async def iter_bytes(
        self,
        key: str,
        *,
        start: int = 0,
        end: int | None = None,
        chunk_size: int | None = None,
        retry: RetryPolicy | None = None,
    ) -> AsyncIterator[bytes]:
        """Stream an object's bytes ``[start, end)`` without holding it in memory.

        A broken connection resumes from the last byte received, pinned to the same version
        of the object. When the whole object is read, it is verified as it streams and
        :class:`IntegrityError` is raised after the last chunk if it does not match.

        Raises:
            NotFoundError, InvalidRangeError, PreconditionFailedError (the object changed
            while it was read), IntegrityError.
        """
        full = self._key(key, "iter_bytes")
        start, end = _validate_range((start, end), full, self.url)
        if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size <= 0):
            raise ValueError(f"chunk_size must be a positive int, not {chunk_size!r}")
        policy = retry or self.retry
        info = await self._head(full, "iter_bytes", policy)
        stop = self._check_range(full, start, end, info.size, "iter_bytes")
        whole = start == 0 and stop == info.size
        algorithm = pick_algorithm(info.checksums, self.transfer.checksum) if whole else None
        digest = ObjectDigest(algorithm)
        async for chunk in read_stream(
            self,
            full,
            start,
            stop,
            etag=info.etag,
            chunk_size=chunk_size or self.transfer.chunk_size,
            policy=policy,
        ):
            if algorithm is not None:
                if len(chunk) >= 256 * 1024:
                    await anyio.to_thread.run_sync(digest.part, chunk, limiter=self.limits.cpu)
                else:
                    digest.part(chunk)
            yield chunk
        if algorithm is not None and digest.whole()[algorithm] != info.checksums[algorithm]:
            raise IntegrityError(
                f"{algorithm} of the bytes streamed does not match the recorded "
                f"{info.checksums[algorithm]}",
                key=full,
                store=self.backend.url,
                operation="iter_bytes",
            )

    async def download(
        self,
        key: str,
        dest: str | os.PathLike[str],
        *,
        progress: ProgressCallback | None = None,
        retry: RetryPolicy | None = None,
    ) -> ObjectInfo:
        """Download an object to the file ``dest``, atomically and verified.

        Large objects are fetched as parallel ranged reads pinned to the object's ETag
        (``TransferConfig.parallel_download``). Bytes go to a temporary file beside
        ``dest``, which is renamed into place only once the checksum matches: on any error
        ``dest`` is untouched and no temporary file is left.

        Raises:
            NotFoundError, IntegrityError, PreconditionFailedError (the object changed
            during the download), OSError (``dest`` cannot be written).
        """
        full = self._key(key, "download")
        dest_path = os.fspath(dest)
        if not os.path.isabs(dest_path):
            dest_path = os.path.join(os.getcwd(), dest_path)
        policy = retry or self.retry
        info = await self._head(full, "download", policy)
        algorithm = pick_algorithm(info.checksums, self.transfer.checksum)
        meter = Progress(progress, info.size)
        directory, name = os.path.split(dest_path)
        tmp = os.path.join(directory, f".{name}.astore-{uuid.uuid4().hex[:12]}.part")

        def create() -> int:
            os.makedirs(directory, exist_ok=True)
            return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)

        fd = await anyio.to_thread.run_sync(create)
        try:
            try:
                await download_to_fd(
                    self, info, fd, algorithm=algorithm, progress=meter, policy=policy
                )
                await anyio.to_thread.run_sync(os.fsync, fd)
            finally:
                os.close(fd)
            await anyio.to_thread.run_sync(os.replace, tmp, dest_path)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(_unlink_quietly, tmp)
            raise
        meter.finish()
        return self._relative(info, key)

    async def stat(self, key: str, *, retry: RetryPolicy | None = None) -> ObjectInfo:
        """Metadata of one object: size, etag, last_modified, checksums, version.

        Raises:
            NotFoundError: no such object.
        """
        full = self._key(key, "stat")
        return self._relative(await self._head(full, "stat", retry or self.retry), key)

    async def exists(self, key: str, *, retry: RetryPolicy | None = None) -> bool:
        """Whether an object exists under ``key``."""
        try:
            await self.stat(key, retry=retry)
        except NotFoundError:
            return False
        return True

    async def list(
        self,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        page_size: int = 1000,
        retry: RetryPolicy | None = None,
    ) -> AsyncIterator[ObjectInfo]:
        """Stream the objects whose key starts with ``prefix``, in lexicographic order.

        Pages are fetched one at a time as you iterate; nothing is materialised. With a
        ``delimiter`` (usually ``"/"``), keys that contain it after the prefix are rolled up
        into common prefixes, yielded as ``ObjectInfo(is_prefix=True)`` in order among the
        objects. A failed page is retried and listing resumes after the last key yielded.

        Example:
            >>> async for info in store.list("runs/7/", delimiter="/"):
            ...     print(info.key, info.size)
        """
        self._check_open()
        check_prefix(prefix, store=self.url, operation="list")
        if delimiter is not None and (not isinstance(delimiter, str) or not delimiter):
            raise ValueError(f"delimiter must be a non-empty str or None, not {delimiter!r}")
        if not isinstance(page_size, int) or not 1 <= page_size <= 1000:
            raise ValueError(f"page_size must be an int from 1 to 1000, not {page_size!r}")
        full_prefix = (
            join_key(self.prefix, prefix) if prefix else (f"{self.prefix}/" if self.prefix else "")
        )
        policy = retry or self.retry
        last: str | None = None
        failures = 0
        while True:
            try:
                pages = self.backend.list_pages(
                    full_prefix, delimiter=delimiter, start_after=last, page_size=page_size
                )
                async for page in pages:
                    entries = [(o.key, o) for o in page.objects] + [
                        (p, None) for p in page.prefixes
                    ]
                    entries.sort(key=lambda kv: kv[0])
                    for full, obj in entries:
                        rel = self._strip(full)
                        last = full
                        if obj is None:
                            yield ObjectInfo(key=rel, is_prefix=True)
                        else:
                            yield self._relative(obj, rel)
                return
            except ObjectError as exc:
                failures += 1
                if not policy.is_retryable(exc) or failures >= policy.max_attempts:
                    raise
                self._count_retry()
                await anyio.sleep(policy.backoff(failures, error=exc))

    # -- deletes and copies --------------------------------------------------------------

    async def delete(self, key: str, *, retry: RetryPolicy | None = None) -> None:
        """Delete one object. Deleting a missing key is not an error (as on S3)."""
        full = self._key(key, "delete")
        failed = await self._call(
            lambda: self.backend.delete_many([full]),
            operation="delete",
            key=full,
            policy=retry,
        )
        if failed:
            raise next(iter(failed.values()))

    async def delete_many(self, keys: Iterable[str], *, retry: RetryPolicy | None = None) -> None:
        """Delete many objects, in batches of 1,000 requests' worth.

        All keys are validated before anything is deleted; missing keys are not errors.

        Raises:
            InvalidKeyError before any deletion; an ExceptionGroup of the per-key errors if
            some objects could not be deleted.
        """
        full_keys = [self._key(k, "delete_many") for k in keys]
        errors: list[ObjectError] = []

        async def batch(chunk: list[str]) -> None:
            failed = await self._call(
                lambda: self.backend.delete_many(chunk),
                operation="delete_many",
                key=None,
                policy=retry,
            )
            errors.extend(failed.values())

        try:
            async with anyio.create_task_group() as tg:
                for i in range(0, len(full_keys), DELETE_BATCH):
                    tg.start_soon(batch, full_keys[i : i + DELETE_BATCH])
        except BaseExceptionGroup as group:
            raise first_error(group) from None
        if errors:
            raise ExceptionGroup(f"could not delete {len(errors)} object(s)", errors)

    async def copy(
        self,
        src: str,
        dst: str,
        *,
        if_not_exists: bool = False,
        retry: RetryPolicy | None = None,
    ) -> ObjectInfo:
        """Copy an object within the store, on the service's side (no bytes through here).

        Raises:
            NotFoundError (``src`` missing), AlreadyExistsError (``if_not_exists``).
        """
        full_src = self._key(src, "copy")
        full_dst = self._key(dst, "copy")
        policy = retry or self.retry
        if not if_not_exists:
            info = await self._call(
                lambda: self.backend.copy(full_src, full_dst, if_not_exists=False),
                operation="copy",
                key=full_src,
                policy=policy,
            )
            return self._relative(info, dst)
        # A conditional copy whose response was lost must be recognised on retry.
        source = await self._head(full_src, "copy", policy)
        info = await conditional(
            self,
            lambda: self.backend.copy(full_src, full_dst, if_not_exists=True),
            key=full_dst,
            size=source.size,
            checksums=source.checksums,
            policy=policy,
            operation="copy",
        )
        return self._relative(info, dst)

    def url_for(self, key: str) -> str:
        """The full URL of ``key``, e.g. ``s3://bucket/prefix/key``."""
        check_key(key, store=self.url, operation="url")
        return f"{self.backend.url}/{join_key(self.prefix, key)}"

    async def signed_url(self, key: str, *, method: str = "GET", expires: float = 3600) -> str:
        """A URL granting ``method`` (``"GET"`` or ``"PUT"``) on ``key`` for ``expires`` s.

        Treat it as a secret: anyone with it has access until it expires.

        Raises:
            UnsupportedOperationError: the store cannot sign URLs (memory, local).
        """
        full = self._key(key, "signed_url")
        if method not in ("GET", "PUT"):
            raise ValueError(f"method must be 'GET' or 'PUT', not {method!r}")
        if not isinstance(expires, int | float) or not 0 < expires <= 7 * 24 * 3600:
            raise ValueError(f"expires must be seconds in (0, 604800], not {expires!r}")
        return await self.backend.signed_url(full, method=method, expires=float(expires))

    # -- incomplete multipart uploads ------------------------------------------------------

    async def list_uploads(self, prefix: str = "") -> AsyncIterator[UploadInfo]:
        """Stream the multipart uploads under ``prefix`` that were neither completed nor aborted.

        Such uploads are left by a process that died mid-upload; their parts are invisible
        but still cost storage on S3 until aborted (see :meth:`abort_uploads`). GCS cannot
        list resumable sessions (they expire after a week); the local store lists the
        uploads of processes that are still running (the rest are removed when it opens).
        """
        self._check_open()
        check_prefix(prefix, store=self.url, operation="list_uploads")
        full_prefix = (
            join_key(self.prefix, prefix) if prefix else (f"{self.prefix}/" if self.prefix else "")
        )
        async for upload in self.backend.list_uploads(full_prefix):
            yield UploadInfo(
                key=self._strip(upload.key), upload_id=upload.upload_id, initiated=upload.initiated
            )

    async def abort_uploads(self, *, older_than: float = 86400.0, prefix: str = "") -> int:
        """Abort incomplete multipart uploads under ``prefix`` older than ``older_than`` seconds.

        Returns:
            How many uploads were aborted.

        Example:
            >>> await store.abort_uploads(older_than=3600)  # a day-old crash's leftovers
        """
        if not isinstance(older_than, int | float) or older_than < 0:
            raise ValueError(f"older_than must be seconds >= 0, not {older_than!r}")
        now = datetime.now(UTC)
        stale = [
            u
            async for u in self.list_uploads(prefix)
            if u.initiated is None or (now - u.initiated).total_seconds() >= older_than
        ]
        for upload in stale:
            full = join_key(self.prefix, upload.key)
            await self._call(
                functools.partial(self.backend.abort_upload, full, upload.upload_id),
                operation="abort_uploads",
                key=full,
            )
        return len(stale)

    # -- background uploads --------------------------------------------------------------

    def upload_in_background(
        self,
        source: Source,
        key: str,
        *,
        if_not_exists: bool = False,
        content_type: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> UploadHandle:
        """Start :meth:`upload` as a background task and return its handle at once.

        Background uploads share the store's limits. Leaving the store's ``async with``
        block (or :meth:`flush`) waits for all of them.
        """
        self._key(key, "upload")
        assert self._task_group is not None
        handle = UploadHandle(key)
        self._background.add(handle)

        async def run() -> None:
            try:
                handle._result = await self.upload(
                    source,
                    key,
                    if_not_exists=if_not_exists,
                    content_type=content_type,
                    retry=retry,
                )
            except Exception as exc:
                handle._error = exc
                log.error("background upload of %s failed: %s", key, exc)
            finally:
                handle._done.set()

        self._task_group.start_soon(run)
        return handle

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


def _validate_range(range_: object, key: str, store: str) -> tuple[int, int | None]:
    if range_ is None:
        return 0, None
    if not isinstance(range_, tuple) or len(range_) != 2:
        raise InvalidRangeError(
            f"a range is a (start, end) tuple, not {range_!r}", key=key, store=store
        )
    start, end = range_
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        raise InvalidRangeError(
            f"range start must be an int >= 0, not {start!r}", key=key, store=store
        )
    if end is not None and (not isinstance(end, int) or isinstance(end, bool) or end < start):
        raise InvalidRangeError(
            f"range end must be an int >= start ({start}) or None, not {end!r}",
            key=key,
            store=store,
        )
    return start, end


def _plan_part_size(part_size: int, size: int | None, caps: Any) -> int:
    """The configured part size, grown to fit the service's part count and alignment."""
    part = max(part_size, caps.min_part_size)
    if size is not None and size > part * caps.max_parts:
        part = -(-size // caps.max_parts)
    align = caps.part_alignment
    part = -(-part // align) * align
    return int(min(part, caps.max_part_size))


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
