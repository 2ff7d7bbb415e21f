"""Upload sources read part by part: paths, binary file objects, async iterators of bytes.

A source is never read whole into memory: :meth:`PartSource.read` fills one part buffer at a
time, and for files the read and the part's checksum happen in the same worker-thread hop.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import BinaryIO, TypeAlias, TypeVar

import anyio.to_thread

from ._checksum import OFF_LOOP_THRESHOLD

__all__ = ["BufferSource", "PartSource", "Source", "open_source"]

Source: TypeAlias = "str | os.PathLike[str] | BinaryIO | AsyncIterable[bytes]"
T = TypeVar("T")


class PartSource:
    """Reads a source in parts; ``size`` is the bytes left to read, if known."""

    size: int | None = None

    async def read(
        self, n: int, digest: Callable[[memoryview], T], limiter: anyio.CapacityLimiter | None
    ) -> tuple[memoryview, T]:
        """Read up to ``n`` bytes (fewer only at the end) and apply ``digest`` to them."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release what the source opened (never a file object the caller passed in)."""


class _FileSource(PartSource):
    def __init__(self, file: BinaryIO, *, owned: bool, size: int | None) -> None:
        self._file = file
        self._owned = owned
        self.size = size

    def _read(self, n: int) -> memoryview:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        readinto = getattr(self._file, "readinto", None)
        while got < n:
            if readinto is not None:
                count = readinto(view[got:])
            else:
                chunk = self._file.read(n - got)
                count = len(chunk)
                view[got : got + count] = chunk
            if not count:
                break
            got += count
        return view[:got]

    async def read(
        self, n: int, digest: Callable[[memoryview], T], limiter: anyio.CapacityLimiter | None
    ) -> tuple[memoryview, T]:
        def run() -> tuple[memoryview, T]:
            data = self._read(n)
            return data, digest(data)

        return await anyio.to_thread.run_sync(run, limiter=limiter)

    async def aclose(self) -> None:
        if self._owned:
            await anyio.to_thread.run_sync(self._file.close)


class _AsyncIterSource(PartSource):
    def __init__(self, iterable: AsyncIterable[bytes]) -> None:
        self._iter: AsyncIterator[bytes] = aiter(iterable)
        self._pending = memoryview(b"")
        self._done = False

    async def read(
        self, n: int, digest: Callable[[memoryview], T], limiter: anyio.CapacityLimiter | None
    ) -> tuple[memoryview, T]:
        buf = bytearray(n)
        got = 0
        while got < n:
            if not self._pending:
                if self._done:
                    break
                try:
                    chunk = await anext(self._iter)
                except StopAsyncIteration:
                    self._done = True
                    break
                if not isinstance(chunk, bytes | bytearray | memoryview):
                    raise TypeError(
                        f"an async iterator source must yield bytes, not {type(chunk).__name__}"
                    )
                self._pending = memoryview(chunk).cast("B")
            take = min(n - got, len(self._pending))
            buf[got : got + take] = self._pending[:take]
            self._pending = self._pending[take:]
            got += take
        data = memoryview(buf)[:got]
        if got >= OFF_LOOP_THRESHOLD:
            return data, await anyio.to_thread.run_sync(digest, data, limiter=limiter)
        return data, digest(data)

    async def aclose(self) -> None:
        close = getattr(self._iter, "aclose", None)
        if close is not None:
            await close()


def _file_size(file: BinaryIO) -> int | None:
    try:
        st = os.fstat(file.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None
        return max(st.st_size - file.tell(), 0)
    except (OSError, AttributeError, io.UnsupportedOperation):
        return None


async def open_source(source: object) -> PartSource:
    """Wrap ``source`` for part-by-part reading.

    Raises:
        TypeError: the source is not a path, a binary file object or an async iterable.
        FileNotFoundError / OSError: a path cannot be opened.
    """
    if isinstance(source, str | os.PathLike):
        path = os.fspath(source)

        def open_path() -> _FileSource:
            f = open(path, "rb")  # noqa: SIM115 - closed by aclose()
            return _FileSource(f, owned=True, size=_file_size(f))

        return await anyio.to_thread.run_sync(open_path)
    if hasattr(source, "__aiter__"):
        return _AsyncIterSource(source)
    if hasattr(source, "read"):
        if isinstance(source, io.TextIOBase):
            raise TypeError("a file source must be opened in binary mode ('rb')")
        file: BinaryIO = source  # type: ignore[assignment]
        size = await anyio.to_thread.run_sync(_file_size, file)
        return _FileSource(file, owned=False, size=size)
    raise TypeError(
        "upload() takes a path, a binary file object or an async iterator of bytes, "
        f"not {type(source).__name__} (use put() for bytes)"
    )


class BufferSource(PartSource):
    """An in-memory buffer served as ``memoryview`` slices (no copy)."""

    def __init__(self, data: memoryview) -> None:
        self._data = data
        self._pos = 0
        self.size = len(data)

    async def read(
        self, n: int, digest: Callable[[memoryview], T], limiter: anyio.CapacityLimiter | None
    ) -> tuple[memoryview, T]:
        data = self._data[self._pos : self._pos + n]
        self._pos += len(data)
        if len(data) >= OFF_LOOP_THRESHOLD:
            return data, await anyio.to_thread.run_sync(digest, data, limiter=limiter)
        return data, digest(data)
