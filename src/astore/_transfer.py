"""Large transfers: streamed multipart upload, resumable ranged reads, parallel download.

These functions hold the transfer policy of :class:`~astore.AsyncStore`: memory is bounded
by per-transfer slots and the store-wide byte budget, every backend call runs under the
retry policy, and an upload that fails or is cancelled is aborted so no part is left behind.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.to_thread
import crc32c as _crc32c

from ._checksum import Crc32cHasher, ObjectDigest, decode_crc32c, new_hasher
from ._exceptions import (
    AlreadyExistsError,
    IntegrityError,
    NetworkError,
    NotFoundError,
    ObjectError,
    TransientError,
    UploadError,
)
from ._progress import Progress
from ._retry import RetryPolicy, retry_call
from ._source import PartSource
from ._types import ObjectInfo, PartInfo

if TYPE_CHECKING:
    from ._base import StoreBase

__all__ = ["first_error", "multipart_upload", "read_stream", "download_to_fd", "conditional"]

T = TypeVar("T")
log = logging.getLogger("astore")


def first_error(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups, or ``exc`` itself."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, anyio.get_cancelled_exc_class())]
        exc = (inner or list(exc.exceptions))[0]
    return exc


async def conditional(
    store: StoreBase,
    fn: Callable[[], Awaitable[ObjectInfo]],
    *,
    key: str,
    size: int,
    checksums: Mapping[str, str],
    policy: RetryPolicy,
    operation: str,
) -> ObjectInfo:
    """Run a write whose retry may find its own earlier, unreported success.

    When an attempt's outcome is unknown (the connection broke after the request was sent)
    and a retry then reports the key as existing (conditional create) or the upload as gone
    (completed already), the object is checked: if it holds exactly what we wrote, the
    write succeeded.
    """
    attempts = 0

    async def once() -> ObjectInfo:
        nonlocal attempts
        attempts += 1
        try:
            return await fn()
        except (AlreadyExistsError, NotFoundError):
            if attempts == 1:
                raise
            try:
                # Already inside a request slot: retry the check without taking another.
                info = await retry_call(
                    policy,
                    functools.partial(store.backend.head, key),
                    operation=operation,
                    key=key,
                    store=store.url,
                )
            except NotFoundError:
                info = None
            if (
                info is not None
                and info.size == size
                and checksums
                and all(info.checksums.get(a) == v for a, v in checksums.items())
            ):
                return info
            raise

    return await store._call(once, operation=operation, key=key, policy=policy)


async def multipart_upload(
    store: StoreBase,
    source: PartSource,
    key: str,
    *,
    part_size: int,
    digest: ObjectDigest,
    first: list[tuple[memoryview, dict[str, str], int]],
    if_not_exists: bool,
    content_type: str | None,
    progress: Progress,
    policy: RetryPolicy,
) -> ObjectInfo:
    """Upload ``source`` part by part; ``first`` holds a part already read (and is emptied)."""
    backend = store.backend
    caps = backend.capabilities
    workers = store.transfer.max_concurrency if caps.parallel_parts else 1
    # Sequential services still get one part of read-ahead, so reading overlaps sending.
    slots = anyio.Semaphore(store.transfer.max_concurrency if caps.parallel_parts else 2)
    budget = store.limits.budget
    if first:
        await slots.acquire()  # the first part's slot, taken before it was read
    ambiguous = False

    async def create() -> str:
        nonlocal ambiguous
        try:
            return await backend.create_upload(
                key,
                content_type=content_type,
                checksum_algorithm=digest.algorithm,
                if_not_exists=if_not_exists,
            )
        except TransientError:
            ambiguous = True  # the service may have started an upload we never heard of
            raise

    try:
        upload_id = await store._call(create, operation="upload", key=key, policy=policy)
    except Exception:
        if ambiguous:  # every start may have reached the service: leave none of them behind
            with anyio.CancelScope(shield=True), anyio.move_on_after(30):
                await _abort_orphans(store, key, keep=None, policy=policy)
        raise
    if ambiguous:
        await _abort_orphans(store, key, keep=upload_id, policy=policy)
    parts: list[PartInfo] = []
    total = 0
    send, receive = anyio.create_memory_object_stream[
        tuple[int, int, memoryview, dict[str, str], int]
    ](0)

    async def worker(rx: anyio.abc.ObjectReceiveStream[Any]) -> None:
        async with rx:
            async for number, offset, data, checksums, taken in rx:
                try:
                    part = await store._call(
                        functools.partial(
                            backend.upload_part,
                            key,
                            upload_id,
                            number,
                            data,
                            offset=offset,
                            checksums=checksums,
                        ),
                        operation="upload",
                        key=key,
                        policy=policy,
                    )
                finally:
                    slots.release()
                    budget.release(taken)
                progress.advance(len(data))
                parts.append(part)
                # Drop the buffer now: an idle worker must not keep a part alive.
                del data

    try:
        try:
            async with anyio.create_task_group() as tg:
                for _ in range(workers):
                    tg.start_soon(worker, receive.clone())
                receive.close()
                async with send:
                    number = 0
                    while True:
                        if first:
                            data, checksums, taken = first.pop()
                        else:
                            await slots.acquire()
                            taken = 0
                            try:
                                taken = await budget.acquire(part_size)
                                data, checksums = await source.read(
                                    part_size, digest.part, store.limits.cpu
                                )
                            except BaseException:
                                slots.release()
                                budget.release(taken)
                                raise
                        if not data and number > 0:
                            slots.release()
                            budget.release(taken)
                            break
                        number += 1
                        if number > caps.max_parts:
                            slots.release()
                            budget.release(taken)
                            raise UploadError(
                                f"the source needs more than {caps.max_parts} parts of "
                                f"{part_size} bytes: raise TransferConfig.part_size",
                                upload_id=upload_id,
                                key=key,
                                store=store.url,
                                operation="upload",
                            )
                        try:
                            await send.send((number, total, data, checksums, taken))
                        except BaseException:
                            slots.release()
                            budget.release(taken)
                            raise
                        total += len(data)
                        last = len(data) < part_size
                        del data  # the worker owns the part now
                        if last:
                            break
        except BaseExceptionGroup as group:
            err = first_error(group)
            raise err from err.__cause__
        parts.sort(key=lambda p: p.number)
        whole = digest.whole()
        return await conditional(
            store,
            lambda: backend.complete_upload(
                key, upload_id, parts, if_not_exists=if_not_exists, checksums=whole
            ),
            key=key,
            size=total,
            checksums=whole,
            policy=policy,
            operation="upload",
        )
    except BaseException as exc:
        aborted = False
        with anyio.CancelScope(shield=True), anyio.move_on_after(30):
            try:
                await backend.abort_upload(key, upload_id)
                aborted = True
            except Exception as abort_exc:  # the original error matters more
                log.warning("could not abort multipart upload of %s: %s", key, abort_exc)
        if isinstance(exc, Exception):
            exc.add_note(
                f"multipart upload {upload_id} {'aborted' if aborted else 'NOT aborted'} "
                f"after {len(parts)} part(s)"
            )
        raise


async def _abort_orphans(
    store: StoreBase, key: str, *, keep: str | None, policy: RetryPolicy
) -> None:
    """Abort the other incomplete uploads of exactly ``key`` after a lost create response.

    The upload whose response was lost is among them; the others are a dead writer's
    leftovers or, rarely, a concurrent writer of the same key, whose upload then fails
    instead of racing ours.
    """
    backend = store.backend

    async def orphans() -> list[str]:
        return [
            u.upload_id
            async for u in backend.list_uploads(key)
            if u.key == key and u.upload_id != keep
        ]

    try:
        for upload_id in await store._call(orphans, operation="upload", key=key, policy=policy):
            await store._call(
                functools.partial(backend.abort_upload, key, upload_id),
                operation="upload",
                key=key,
                policy=policy,
            )
    except ObjectError as exc:  # the upload itself can go on; say what may be left
        log.warning("could not abort orphaned uploads of %s: %s", key, exc)


async def read_stream(
    store: StoreBase,
    key: str,
    start: int,
    end: int,
    *,
    etag: str | None,
    chunk_size: int,
    policy: RetryPolicy,
) -> AsyncIterator[bytes]:
    """Stream ``[start, end)`` of ``key``; a broken stream resumes where it stopped."""
    pos = start
    failures = 0
    while pos < end:
        try:
            chunks = store.backend.get_range(key, pos, end, etag=etag, chunk_size=chunk_size)
            try:
                async for chunk in chunks:
                    pos += len(chunk)
                    yield chunk
            finally:
                aclose = getattr(chunks, "aclose", None)
                if aclose is not None:
                    await aclose()
            if pos < end:
                # A body cut short is a broken connection, not bad data: resume from here.
                raise NetworkError(
                    f"the stream ended after {pos - start} of {end - start} bytes",
                    key=key,
                    store=store.url,
                    operation="get",
                )
        except TransientError as exc:
            failures += 1
            if failures >= policy.max_attempts:
                exc.add_note(f"astore gave up after {failures} broken stream(s)")
                raise
            store._count_retry()
            await anyio.sleep(policy.backoff(failures, error=exc))


# Chunks are gathered up to this size before one worker-thread hop writes and hashes them:
# a hop per 1 MiB chunk cost 7-20% of a download's CPU in profiles.
WRITE_BATCH = 4 * 1024 * 1024


def _write_chunks(fd: int, chunks: list[bytes], offset: int, crc: int) -> int:
    for data in chunks:
        view = memoryview(data)
        while view:
            written = os.pwrite(fd, view, offset)
            view = view[written:]
            offset += written
        crc = _crc32c.crc32c(data, crc)
    return crc


async def download_to_fd(
    store: StoreBase,
    info: ObjectInfo,
    fd: int,
    *,
    algorithm: str | None,
    progress: Progress,
    policy: RetryPolicy,
) -> None:
    """Write the object into ``fd`` (ranges in parallel when large), then verify it.

    Raises:
        IntegrityError: the bytes do not match the recorded checksum.
    """
    cfg = store.transfer
    size = info.size
    parallel = cfg.parallel_download and size >= cfg.multipart_threshold
    step = cfg.part_size if parallel else max(size, 1)
    ranges = [(s, min(s + step, size)) for s in range(0, size, step)]
    crcs: list[int] = [0] * len(ranges)
    pending = iter(enumerate(ranges))
    limiter = store.limits.cpu

    async def worker() -> None:
        for index, (start, end) in pending:
            crc = 0
            offset = start
            batch: list[bytes] = []
            batched = 0
            async for chunk in read_stream(
                store,
                info.key,
                start,
                end,
                etag=info.etag,
                chunk_size=cfg.chunk_size,
                policy=policy,
            ):
                batch.append(chunk)
                batched += len(chunk)
                # read_stream yields the whole range or raises: the last chunk flushes.
                if batched >= WRITE_BATCH or offset + batched >= end:
                    crc = await anyio.to_thread.run_sync(
                        _write_chunks, fd, batch, offset, crc, limiter=limiter
                    )
                    offset += batched
                    progress.advance(batched)
                    batch, batched = [], 0
            crcs[index] = crc

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(min(cfg.max_concurrency if parallel else 1, max(len(ranges), 1))):
                tg.start_soon(worker)
    except BaseExceptionGroup as group:
        err = first_error(group)
        raise err from err.__cause__
    if algorithm is None:
        return
    expected = info.checksums[algorithm]
    if algorithm == "crc32c":
        whole = Crc32cHasher()
        for (start, end), crc in zip(ranges, crcs, strict=True):
            whole.extend(crc, end - start)
        ok = whole.crc == decode_crc32c(expected)
    else:
        ok = await anyio.to_thread.run_sync(_hash_fd, fd, algorithm, limiter=limiter) == expected
    if not ok:
        raise IntegrityError(
            f"{algorithm} of the downloaded bytes does not match the recorded {expected}",
            key=info.key,
            store=store.url,
            operation="download",
        )


def _hash_fd(fd: int, algorithm: str) -> str:
    hasher = new_hasher(algorithm)
    offset = 0
    while chunk := os.pread(fd, 8 << 20, offset):
        hasher.update(chunk)
        offset += len(chunk)
    return hasher.value()
