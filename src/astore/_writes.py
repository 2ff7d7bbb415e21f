"""AsyncStore's writes: put, upload (streamed multipart), copy, delete, background uploads."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.to_thread

from ._backend import Buffer
from ._base import StoreBase, UploadHandle
from ._checksum import ObjectDigest
from ._exceptions import ObjectError
from ._keys import check_prefix, join_key
from ._progress import Progress, ProgressCallback
from ._retry import RetryPolicy
from ._source import BufferSource, PartSource, Source, open_source
from ._transfer import conditional, first_error, multipart_upload
from ._types import ObjectInfo, UploadInfo

__all__ = ["WriteOps"]

log = logging.getLogger("astore")
DELETE_BATCH = 1000


class WriteOps(StoreBase):
    """The writing half of :class:`~astore.AsyncStore`."""

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
                    functools.partial(
                        self.backend.put_object,
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
        # Handed over in a list the upload empties: no frame but the upload's keeps the part.
        first = [(data, checksums, taken)]
        del data
        return await multipart_upload(
            self,
            src,
            full,
            part_size=part_size,
            digest=digest,
            first=first,
            if_not_exists=if_not_exists,
            content_type=content_type,
            progress=meter,
            policy=policy,
        )

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
            err = first_error(group)
            raise err from err.__cause__
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

        async def collect() -> list[UploadInfo]:
            return [u async for u in self.backend.list_uploads(full_prefix)]

        # Few in number: fetched whole, under the retry policy and its deadline.
        uploads = await self._call(collect, operation="list_uploads", key=full_prefix or None)
        for upload in uploads:
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


def _plan_part_size(part_size: int, size: int | None, caps: Any) -> int:
    """The configured part size, grown to fit the service's part count and alignment."""
    part = max(part_size, caps.min_part_size)
    if size is not None and size > part * caps.max_parts:
        part = -(-size // caps.max_parts)
    align = caps.part_alignment
    part = -(-part // align) * align
    return int(min(part, caps.max_part_size))
