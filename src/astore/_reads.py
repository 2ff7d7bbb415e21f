"""AsyncStore's reads: get, iter_bytes, download (parallel, verified, atomic), stat, list."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator

import anyio
import anyio.to_thread

from ._base import StoreBase
from ._checksum import ObjectDigest, pick_algorithm
from ._exceptions import (
    IntegrityError,
    InvalidRangeError,
    NotFoundError,
    ObjectError,
    RequestTimeoutError,
    TransientError,
)
from ._keys import check_key, check_prefix, join_key
from ._progress import Progress, ProgressCallback
from ._retry import RetryPolicy
from ._transfer import download_to_fd, read_stream
from ._types import ListPage, ObjectInfo

__all__ = ["ReadOps"]


class ReadOps(StoreBase):
    """The reading half of :class:`~astore.AsyncStore`."""

    # -- reads ---------------------------------------------------------------------------

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
        chunk_size = self.transfer.chunk_size
        chunks: list[bytes] = []
        if range is None:
            # One request where the backend can: metadata and body together.
            info, body = await self._call(
                lambda: self.backend.read_object(full, chunk_size=chunk_size),
                operation="get",
                key=full,
                policy=policy,
            )
            stop = info.size
            meter = Progress(progress, stop)
            received = 0
            try:
                async for chunk in body:
                    chunks.append(chunk)
                    received += len(chunk)
                    meter.advance(len(chunk))
            except TransientError:
                pass  # resumed below from the last byte received, pinned to this version
            finally:
                aclose = getattr(body, "aclose", None)
                if aclose is not None:
                    await aclose()
            start = received
            if start < stop:
                self._count_retry()  # the body broke or was cut short: resume it
        else:
            info = await self._head(full, "get", policy)
            stop = self._check_range(full, start, end, info.size, "get")
            meter = Progress(progress, stop - start)
        if start < stop:
            async for chunk in read_stream(
                self, full, start, stop, etag=info.etag, chunk_size=chunk_size, policy=policy
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
                while (page := await self._next_page(pages, policy, full_prefix)) is not None:
                    failures = 0
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
                timed_out = isinstance(exc, RequestTimeoutError) and exc.operation == "list"
                if timed_out or not policy.is_retryable(exc) or failures >= policy.max_attempts:
                    raise
                self._count_retry()
                await anyio.sleep(policy.backoff(failures, error=exc))

    async def _next_page(
        self, pages: AsyncIterator[ListPage], policy: RetryPolicy, prefix: str
    ) -> ListPage | None:
        """The next page, or None at the end; one page may take at most the policy's deadline."""
        try:
            with anyio.fail_after(policy.deadline):
                return await anext(pages)
        except StopAsyncIteration:
            return None
        except TimeoutError as exc:
            if isinstance(exc, RequestTimeoutError):
                raise
            raise RequestTimeoutError(
                f"a page of the listing took longer than the {policy.deadline}s deadline",
                key=prefix,
                store=self.backend.url,
                operation="list",
            ) from exc

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


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
