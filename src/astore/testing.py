"""Testing helpers: a backend wrapper that injects faults, for astore's tests and yours.

:class:`FaultyBackend` wraps any backend and, per operation, injects latency, transient
server errors, throttling, lost responses (the request succeeded but the caller never
heard), connections reset half way through a body, truncated bodies, flipped bits and a
simulated crash after N bytes -- chosen at random with a seed, or scripted call by call::

    backend = FaultyBackend(MemoryBackend("t"), rate=0.15, seed=1)
    async with AsyncStore(backend, retry=RetryPolicy(initial_backoff=0.001)) as store:
        await store.put("k", b"...")          # survives the injected faults
    print(backend.injected)                   # Counter of what was injected
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence

import anyio

from ._backend import Backend, Buffer
from ._exceptions import AstoreError, NetworkError, ObjectError, ServerError, ThrottledError
from ._types import Capabilities, ListPage, ObjectInfo, PartInfo, UploadInfo

__all__ = ["FAULTS", "FaultyBackend", "SimulatedCrash"]

FAULTS = ("latency", "error", "throttle", "lost_response", "reset", "truncate", "corrupt")
"""Every fault kind. ``reset``, ``truncate`` and ``corrupt`` apply to read bodies,
``lost_response`` to writes; the others to every operation."""

_BODY_FAULTS = frozenset({"reset", "truncate", "corrupt"})
_WRITES = frozenset(
    {"put_object", "create_upload", "upload_part", "complete_upload", "copy", "delete_many"}
)


class SimulatedCrash(AstoreError):
    """Raised by :class:`FaultyBackend` once ``crash_after_bytes`` bytes were written."""


class FaultyBackend(Backend):
    """Wraps ``inner`` and injects faults.

    Args:
        inner: the backend to wrap.
        rate: probability that a call gets a fault (0 to 1).
        seed: seed of the random choices, for reproducible runs.
        faults: which kinds to draw from (default: all that make sense for the call, except
            ``corrupt``, which is not transient and must be asked for).
        script: per operation name, a list of faults (or None) used call by call before
            random draws; e.g. ``{"upload_part": [None, "error"]}`` fails the second part.
        latency: seconds of injected latency.
        retry_after: seconds a throttling error asks to wait.
        crash_after_bytes: raise :class:`SimulatedCrash` on the write that would pass this
            many bytes written in all (nothing of that write is stored).

    Attributes:
        injected: a Counter of the faults injected so far, by kind.
    """

    def __init__(
        self,
        inner: Backend,
        *,
        rate: float = 0.0,
        seed: int | None = None,
        faults: Sequence[str] | None = None,
        script: Mapping[str, Sequence[str | None]] | None = None,
        latency: float = 0.01,
        retry_after: float = 0.001,
        crash_after_bytes: int | None = None,
    ) -> None:
        unknown = set(faults or ()) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; choose from {FAULTS}")
        if not 0 <= rate <= 1:
            raise ValueError(f"rate must be within [0, 1], not {rate!r}")
        self.inner = inner
        self.rate = rate
        self.faults = (
            tuple(faults) if faults is not None else tuple(f for f in FAULTS if f != "corrupt")
        )
        self.script = {op: list(seq) for op, seq in (script or {}).items()}
        self.latency = latency
        self.retry_after = retry_after
        self.crash_after_bytes = crash_after_bytes
        self.written = 0
        self.injected: Counter[str] = Counter()
        self._rng = random.Random(seed)

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        return self.inner.capabilities

    @property
    def url(self) -> str:
        return self.inner.url

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    # -- choosing and raising faults -------------------------------------------------------

    def _draw(self, operation: str, allowed: frozenset[str]) -> str | None:
        queue = self.script.get(operation)
        if queue:
            return queue.pop(0)
        candidates = [f for f in self.faults if f in allowed]
        if candidates and self._rng.random() < self.rate:
            return self._rng.choice(candidates)
        return None

    async def _before(self, operation: str, key: str | None, *, body: bool = False) -> str | None:
        allowed = {"latency", "error", "throttle"}
        if operation in _WRITES:
            allowed.add("lost_response")
        if body:
            allowed |= _BODY_FAULTS
        fault = self._draw(operation, frozenset(allowed))
        if fault is None:
            return None
        self.injected[fault] += 1
        where = {"key": key, "store": self.url, "operation": operation}
        if fault == "latency":
            await anyio.sleep(self.latency)
        elif fault == "error":
            raise ServerError("injected 503 Service Unavailable", **where)
        elif fault == "throttle":
            raise ThrottledError("injected SlowDown", retry_after=self.retry_after, **where)
        return fault

    def _lost(self, operation: str, key: str | None) -> NetworkError:
        return NetworkError(
            "injected connection reset after the request was sent",
            key=key,
            store=self.url,
            operation=operation,
        )

    def _count_written(self, n: int, key: str, operation: str) -> None:
        if self.crash_after_bytes is not None and self.written + n > self.crash_after_bytes:
            self.injected["crash"] += 1
            raise SimulatedCrash(f"simulated crash after {self.written} bytes written")
        self.written += n

    # -- primitives ------------------------------------------------------------------------

    async def head(self, key: str) -> ObjectInfo:
        await self._before("head", key)
        return await self.inner.head(key)

    async def get_range(
        self, key: str, start: int, end: int | None, *, etag: str | None, chunk_size: int
    ) -> AsyncIterator[bytes]:
        fault = await self._before("get_range", key, body=True)
        count = 0
        async for chunk in self.inner.get_range(key, start, end, etag=etag, chunk_size=chunk_size):
            count += 1
            if fault in ("reset", "truncate") and count >= 1 and len(chunk) > 1:
                half = chunk[: len(chunk) // 2]
                if half:
                    yield half
                if fault == "reset":
                    raise NetworkError(
                        "injected connection reset mid-body",
                        key=key,
                        store=self.url,
                        operation="get_range",
                    )
                return  # truncated: the body just stops
            if fault == "corrupt":
                flipped = bytearray(chunk)
                flipped[len(flipped) // 2] ^= 0x10
                chunk = bytes(flipped)
                fault = None
            yield chunk

    async def put_object(
        self,
        key: str,
        data: Buffer,
        *,
        if_not_exists: bool,
        checksums: Mapping[str, str],
        content_type: str | None,
    ) -> ObjectInfo:
        fault = await self._before("put_object", key)
        self._count_written(len(data), key, "put_object")
        info = await self.inner.put_object(
            key, data, if_not_exists=if_not_exists, checksums=checksums, content_type=content_type
        )
        if fault == "lost_response":
            raise self._lost("put_object", key)
        return info

    async def list_pages(
        self, prefix: str, *, delimiter: str | None, start_after: str | None, page_size: int
    ) -> AsyncIterator[ListPage]:
        await self._before("list_pages", prefix)
        async for page in self.inner.list_pages(
            prefix, delimiter=delimiter, start_after=start_after, page_size=page_size
        ):
            yield page
            await self._before("list_pages", prefix)

    async def delete_many(self, keys: Sequence[str]) -> dict[str, ObjectError]:
        fault = await self._before("delete_many", None)
        result = await self.inner.delete_many(keys)
        if fault == "lost_response":
            raise self._lost("delete_many", None)
        return result

    async def copy(self, src: str, dst: str, *, if_not_exists: bool) -> ObjectInfo:
        fault = await self._before("copy", src)
        info = await self.inner.copy(src, dst, if_not_exists=if_not_exists)
        if fault == "lost_response":
            raise self._lost("copy", src)
        return info

    async def create_upload(
        self,
        key: str,
        *,
        content_type: str | None,
        checksum_algorithm: str | None,
        if_not_exists: bool = False,
    ) -> str:
        fault = await self._before("create_upload", key)
        upload_id = await self.inner.create_upload(
            key,
            content_type=content_type,
            checksum_algorithm=checksum_algorithm,
            if_not_exists=if_not_exists,
        )
        if fault == "lost_response":
            raise self._lost("create_upload", key)
        return upload_id

    async def upload_part(
        self,
        key: str,
        upload_id: str,
        number: int,
        data: Buffer,
        *,
        offset: int,
        checksums: Mapping[str, str],
    ) -> PartInfo:
        fault = await self._before("upload_part", key)
        self._count_written(len(data), key, "upload_part")
        part = await self.inner.upload_part(
            key, upload_id, number, data, offset=offset, checksums=checksums
        )
        if fault == "lost_response":
            raise self._lost("upload_part", key)
        return part

    async def complete_upload(
        self,
        key: str,
        upload_id: str,
        parts: Sequence[PartInfo],
        *,
        if_not_exists: bool,
        checksums: Mapping[str, str],
    ) -> ObjectInfo:
        fault = await self._before("complete_upload", key)
        info = await self.inner.complete_upload(
            key, upload_id, parts, if_not_exists=if_not_exists, checksums=checksums
        )
        if fault == "lost_response":
            raise self._lost("complete_upload", key)
        return info

    async def abort_upload(self, key: str, upload_id: str) -> None:
        await self.inner.abort_upload(key, upload_id)

    async def list_uploads(self, prefix: str) -> AsyncIterator[UploadInfo]:
        async for upload in self.inner.list_uploads(prefix):
            yield upload

    async def signed_url(self, key: str, *, method: str, expires: float) -> str:
        return await self.inner.signed_url(key, method=method, expires=expires)
