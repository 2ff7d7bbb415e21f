"""The local-filesystem backend, the embedded default.

Objects are plain files at their natural paths under the root, so ``ls`` shows them. astore's
bookkeeping lives in ``ROOT/.astore/`` (temporary files, multipart uploads), which no key can
name. Checksums are recorded in a ``user.astore`` extended attribute of the file, set before
the file is renamed into place, together with the size and mtime they describe; a file changed
behind astore's back (or on a filesystem without user xattrs) simply has no recorded checksum.

Writes are atomic: data goes to a temporary file in ``ROOT/.astore/tmp`` (same filesystem),
is fsynced, then renamed over the key (or hard-linked, for a conditional create, which fails
atomically if the key exists). Multipart uploads write their parts in parallel at their
offsets into one file. Temporary files and uploads left by a process that died are removed
the next time a store is opened on the root. Every file operation runs in one worker-thread
hop; reads hop once per chunk.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import shutil
import stat as stat_mod
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from itertools import islice
from typing import TypeVar

import anyio.to_thread

from .._backend import Backend, Buffer
from .._exceptions import (
    AlreadyExistsError,
    InvalidKeyError,
    InvalidRangeError,
    NotFoundError,
    ObjectError,
    PermissionDeniedError,
    PreconditionFailedError,
    UnsupportedOperationError,
)
from .._types import Capabilities, ListPage, ObjectInfo, PartInfo, UploadInfo

__all__ = ["LocalBackend"]

T = TypeVar("T")
_XATTR = "user.astore"
_META_DIR = ".astore"


def _etag(st: os.stat_result) -> str:
    return f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LocalBackend(Backend):
    """Objects as files under a root folder.

    Args:
        root: the folder (created if missing).
        fsync: fsync files and folders before a write is reported done (durability across a
            power loss). Turning it off makes small writes much faster.
    """

    capabilities = Capabilities(parallel_parts=True, conditional_writes=True)

    def __init__(self, root: str, *, fsync: bool = True) -> None:
        if not isinstance(fsync, bool):
            raise TypeError(f"fsync must be a bool, not {fsync!r}")
        self.root = root if os.path.isabs(root) else os.path.abspath(root)
        self.fsync = fsync
        self._real_root = self.root
        self._meta = os.path.join(self.root, _META_DIR)
        self._tmp = os.path.join(self._meta, "tmp")
        self._uploads = os.path.join(self._meta, "uploads")

    @property
    def url(self) -> str:
        return f"file://{self.root}"

    # -- plumbing ------------------------------------------------------------------------

    async def _run(self, fn: Callable[[], T], *, key: str | None, operation: str) -> T:
        try:
            return await anyio.to_thread.run_sync(fn)
        except ObjectError:
            raise
        except OSError as exc:
            raise self._map(exc, key, operation) from exc

    def _map(self, exc: OSError, key: str | None, operation: str) -> ObjectError:
        kw = {"key": key, "store": self.url, "operation": operation}
        if isinstance(exc, FileNotFoundError):
            return NotFoundError("no such object", **kw)
        if isinstance(exc, PermissionError):
            return PermissionDeniedError(f"permission denied ({exc.strerror})", **kw)
        if isinstance(exc, FileExistsError | IsADirectoryError | NotADirectoryError):
            return AlreadyExistsError(
                "the key conflicts with an existing object or folder of objects", **kw
            )
        return ObjectError(f"{exc.strerror or exc}", **kw)

    def _path(self, key: str, operation: str) -> str:
        parts = key.split("/")
        path = os.path.join(self._real_root, *parts)
        # lstat each component below the root (the root itself is resolved at open): much
        # cheaper than realpath(), which walks every component from "/".
        current = self._real_root
        for part in parts:
            current = os.path.join(current, part)
            try:
                st = os.lstat(current)
            except (FileNotFoundError, NotADirectoryError):
                return path  # nothing exists below here, so no link can lead out
            if stat_mod.S_ISLNK(st.st_mode):
                if not os.path.realpath(path).startswith(self._real_root + os.sep):
                    raise InvalidKeyError(
                        "the key leads out of the store's root through a symbolic link",
                        key=key,
                        store=self.url,
                        operation=operation,
                    )
                return path
        return path

    def _open_sync(self) -> None:
        os.makedirs(self._tmp, exist_ok=True)
        os.makedirs(self._uploads, exist_ok=True)
        self._real_root = os.path.realpath(self.root)
        for name in os.listdir(self._tmp):
            writer = name.split("-", 1)[0]
            if writer.isdigit() and not _pid_alive(int(writer)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self._tmp, name))
        for name in os.listdir(self._uploads):
            info = self._upload_info(name)
            owner = info.get("pid") if info else None
            if not isinstance(owner, int) or not _pid_alive(owner):
                shutil.rmtree(os.path.join(self._uploads, name), ignore_errors=True)

    async def open(self) -> None:
        await self._run(self._open_sync, key=None, operation="open")

    def _tmp_file(self) -> tuple[str, int]:
        path = os.path.join(self._tmp, f"{os.getpid()}-{uuid.uuid4().hex}")
        return path, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)

    def _checksums(
        self, path_or_fd: str | int, st: os.stat_result
    ) -> tuple[dict[str, str], str | None]:
        try:
            meta = json.loads(os.getxattr(path_or_fd, _XATTR))
        except (OSError, ValueError, AttributeError):
            return {}, None
        if meta.get("size") != st.st_size or meta.get("mtime_ns") != st.st_mtime_ns:
            return {}, None  # changed behind astore's back: what was recorded no longer holds
        return dict(meta.get("checksums", {})), meta.get("content_type")

    def _info(self, key: str, path_or_fd: str | int, st: os.stat_result) -> ObjectInfo:
        checksums, content_type = self._checksums(path_or_fd, st)
        return ObjectInfo(
            key=key,
            size=st.st_size,
            etag=_etag(st),
            last_modified=datetime.fromtimestamp(st.st_mtime_ns / 1e9, UTC),
            checksums=checksums,
            content_type=content_type,
        )

    def _finalize(
        self,
        tmp: str,
        fd: int,
        key: str,
        *,
        if_not_exists: bool,
        checksums: Mapping[str, str],
        content_type: str | None,
        operation: str,
        dest: str | None = None,
    ) -> ObjectInfo:
        """fsync ``tmp``, record its checksums, and move it to ``key`` atomically."""
        recorded: Mapping[str, str] = {}
        try:
            if self.fsync:
                os.fsync(fd)
            st = os.fstat(fd)
            meta = {
                "size": st.st_size,
                "mtime_ns": st.st_mtime_ns,
                "checksums": dict(checksums),
                "content_type": content_type,
            }
            with contextlib.suppress(OSError, AttributeError):  # no user xattrs here
                os.setxattr(fd, _XATTR, json.dumps(meta).encode())
                recorded = checksums
        finally:
            os.close(fd)
        try:
            dest = dest or self._path(key, operation)
            parent = os.path.dirname(dest)
            for _ in range(10):
                os.makedirs(parent, exist_ok=True)
                try:
                    if if_not_exists:
                        os.link(tmp, dest)
                        os.unlink(tmp)
                    else:
                        os.replace(tmp, dest)
                    break
                except FileNotFoundError:
                    continue  # a concurrent delete pruned the empty parent; make it again
                except FileExistsError as exc:
                    raise AlreadyExistsError(
                        "the object already exists", key=key, store=self.url, operation=operation
                    ) from exc
            if self.fsync:
                dirfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(dirfd)
                finally:
                    os.close(dirfd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        # A rename keeps the inode and mtime: the temp file's stat describes the object.
        return ObjectInfo(
            key=key,
            size=st.st_size,
            etag=_etag(st),
            last_modified=datetime.fromtimestamp(st.st_mtime_ns / 1e9, UTC),
            checksums=dict(recorded),
            content_type=content_type,
        )

    # -- objects -------------------------------------------------------------------------

    async def head(self, key: str) -> ObjectInfo:
        def run() -> ObjectInfo:
            path = self._path(key, "head")
            st = os.stat(path)
            if not stat_mod.S_ISREG(st.st_mode):
                raise FileNotFoundError(errno.ENOENT, "not a file")
            return self._info(key, path, st)

        return await self._run(run, key=key, operation="head")

    def _open_read(
        self, key: str, start: int, end: int | None, etag: str | None, chunk_size: int
    ) -> tuple[int, os.stat_result, int, bytes]:
        """Open ``key``, check version and range, read the first chunk (one thread hop)."""
        fd = os.open(self._path(key, "get"), os.O_RDONLY | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat_mod.S_ISREG(st.st_mode):
                raise FileNotFoundError(errno.ENOENT, "not a file")
            if etag is not None and _etag(st) != etag:
                raise PreconditionFailedError(
                    "the object changed while it was read", key=key, store=self.url, operation="get"
                )
            stop = st.st_size if end is None else end
            if start > st.st_size or stop > st.st_size:
                raise InvalidRangeError(
                    f"range {start}-{stop} outside {st.st_size} bytes",
                    key=key,
                    store=self.url,
                    operation="get",
                )
            first = os.pread(fd, min(chunk_size, stop - start), start) if stop > start else b""
            return fd, st, stop, first
        except BaseException:
            os.close(fd)
            raise

    async def _chunks(
        self, key: str, fd: int, start: int, stop: int, data: bytes, chunk_size: int
    ) -> AsyncIterator[bytes]:
        try:
            pos = start
            while pos < stop:
                if not data:
                    raise PreconditionFailedError(
                        "the file was truncated while it was read",
                        key=key,
                        store=self.url,
                        operation="get",
                    )
                pos += len(data)
                yield data
                if pos < stop:
                    data = await self._run(
                        functools.partial(os.pread, fd, min(chunk_size, stop - pos), pos),
                        key=key,
                        operation="get",
                    )
        finally:
            os.close(fd)

    async def read_object(
        self, key: str, *, chunk_size: int
    ) -> tuple[ObjectInfo, AsyncIterator[bytes]]:
        def run() -> tuple[ObjectInfo, int, int, bytes]:
            fd, st, stop, first = self._open_read(key, 0, None, None, chunk_size)
            return self._info(key, fd, st), fd, stop, first

        info, fd, stop, first = await self._run(run, key=key, operation="get")
        return info, self._chunks(key, fd, 0, stop, first, chunk_size)

    async def get_range(
        self, key: str, start: int, end: int | None, *, etag: str | None, chunk_size: int
    ) -> AsyncIterator[bytes]:
        fd, _, stop, first = await self._run(
            functools.partial(self._open_read, key, start, end, etag, chunk_size),
            key=key,
            operation="get",
        )
        async for chunk in self._chunks(key, fd, start, stop, first, chunk_size):
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
        def run() -> ObjectInfo:
            dest = self._path(key, "put")  # refuse an escaping key before writing anything
            tmp, fd = self._tmp_file()
            try:
                view = memoryview(data).cast("B")
                while view:
                    view = view[os.write(fd, view) :]
            except BaseException:
                os.close(fd)
                os.unlink(tmp)
                raise
            return self._finalize(
                tmp,
                fd,
                key,
                if_not_exists=if_not_exists,
                checksums=checksums,
                content_type=content_type,
                operation="put",
                dest=dest,
            )

        return await self._run(run, key=key, operation="put")

    def _walk(
        self, rel: str, partial: str, delimiter: str | None, start_after: str | None
    ) -> Iterator[tuple[str, os.DirEntry[str] | None]]:
        """Yield ``(key, entry)`` in S3 order; ``entry`` is None for a common prefix."""
        directory = os.path.join(self._real_root, *rel.split("/")) if rel else self._real_root
        if rel and not os.path.realpath(directory).startswith(self._real_root + os.sep):
            return  # a symbolic link out of the root: nothing of this store lies there
        try:
            with os.scandir(directory) as it:
                entries = [e for e in it if e.name.startswith(partial)]
        except (FileNotFoundError, NotADirectoryError):
            return
        dirs = {e.name for e in entries if e.is_dir(follow_symlinks=False)}
        entries.sort(key=lambda e: e.name + "/" if e.name in dirs else e.name)
        for entry in entries:
            if not rel and entry.name.startswith(_META_DIR):
                continue
            key = f"{rel}/{entry.name}" if rel else entry.name
            if entry.name in dirs:
                if (
                    start_after is not None
                    and key + "/" < start_after
                    and not start_after.startswith(key + "/")
                ):
                    continue  # the whole folder sorts before the resume point
                if delimiter:
                    if start_after is None or key + "/" > start_after:
                        yield key + "/", None
                else:
                    yield from self._walk(key, "", delimiter, start_after)
            elif entry.is_file(follow_symlinks=False) and (
                start_after is None or key > start_after
            ):
                yield key, entry

    async def list_pages(
        self, prefix: str, *, delimiter: str | None, start_after: str | None, page_size: int
    ) -> AsyncIterator[ListPage]:
        if delimiter not in (None, "/"):
            raise UnsupportedOperationError(f"{self.url} lists only with delimiter '/'")
        rel, _, partial = prefix.rpartition("/")
        items = self._walk(rel, partial, delimiter, start_after)

        def page() -> ListPage:
            objects: list[ObjectInfo] = []
            prefixes: list[str] = []
            for key, entry in islice(items, page_size):
                if entry is None:
                    prefixes.append(key)
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # deleted while listing
                objects.append(self._info(key, entry.path, st))
            return ListPage(objects=objects, prefixes=prefixes)

        while True:
            result = await self._run(page, key=prefix, operation="list")
            if not result.objects and not result.prefixes:
                return
            yield result

    def _prune(self, path: str) -> None:
        parent = os.path.dirname(path)
        while parent != self._real_root and parent.startswith(self._real_root):
            try:
                os.rmdir(parent)
            except OSError:
                return
            parent = os.path.dirname(parent)

    async def delete_many(self, keys: Sequence[str]) -> dict[str, ObjectError]:
        def run() -> dict[str, ObjectError]:
            failed: dict[str, ObjectError] = {}
            for key in keys:
                try:
                    path = self._path(key, "delete")
                    os.unlink(path)
                    self._prune(path)
                except (FileNotFoundError, NotADirectoryError):
                    pass
                except IsADirectoryError:
                    pass  # a folder of objects, not an object
                except ObjectError as exc:
                    failed[key] = exc
                except OSError as exc:
                    failed[key] = self._map(exc, key, "delete")
            return failed

        return await self._run(run, key=None, operation="delete")

    async def copy(self, src: str, dst: str, *, if_not_exists: bool) -> ObjectInfo:
        def run() -> ObjectInfo:
            source = self._path(src, "copy")
            self._path(dst, "copy")
            st = os.stat(source)
            if not stat_mod.S_ISREG(st.st_mode):
                raise NotFoundError("no such object", key=src, store=self.url, operation="copy")
            checksums, content_type = self._checksums(source, st)
            tmp, fd = self._tmp_file()
            try:
                with open(source, "rb") as fsrc:
                    while _copy_chunk(fsrc.fileno(), fd):
                        pass
            except BaseException:
                os.close(fd)
                os.unlink(tmp)
                raise
            return self._finalize(
                tmp,
                fd,
                dst,
                if_not_exists=if_not_exists,
                checksums=checksums,
                content_type=content_type,
                operation="copy",
            )

        return await self._run(run, key=src, operation="copy")

    # -- multipart -----------------------------------------------------------------------

    def _upload_dir(self, upload_id: str) -> str:
        if not upload_id.isalnum():
            raise NotFoundError(f"no multipart upload {upload_id!r}", store=self.url)
        return os.path.join(self._uploads, upload_id)

    def _upload_info(self, upload_id: str) -> dict[str, object] | None:
        try:
            with open(os.path.join(self._uploads, upload_id, "info.json"), "rb") as f:
                info: dict[str, object] = json.load(f)
                return info
        except (OSError, ValueError):
            return None

    def _check_upload(self, key: str, upload_id: str, operation: str) -> str:
        info = self._upload_info(upload_id) if upload_id.isalnum() else None
        if info is None or info.get("key") != key:
            raise NotFoundError(
                f"no multipart upload {upload_id!r}", key=key, store=self.url, operation=operation
            )
        return self._upload_dir(upload_id)

    async def create_upload(
        self,
        key: str,
        *,
        content_type: str | None,
        checksum_algorithm: str | None,
        if_not_exists: bool = False,
    ) -> str:
        upload_id = uuid.uuid4().hex

        def run() -> str:
            self._path(key, "create_upload")
            directory = self._upload_dir(upload_id)
            os.makedirs(directory)
            os.close(os.open(os.path.join(directory, "data"), os.O_WRONLY | os.O_CREAT, 0o644))
            info = {
                "key": key,
                "pid": os.getpid(),
                "initiated": datetime.now(UTC).isoformat(),
                "content_type": content_type,
            }
            with open(os.path.join(directory, "info.json"), "w") as f:
                json.dump(info, f)
            return upload_id

        return await self._run(run, key=key, operation="create_upload")

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
        def run() -> PartInfo:
            directory = self._check_upload(key, upload_id, "upload_part")
            fd = os.open(os.path.join(directory, "data"), os.O_WRONLY | os.O_CLOEXEC)
            try:
                view = memoryview(data).cast("B")
                pos = offset
                while view:
                    written = os.pwrite(fd, view, pos)
                    view = view[written:]
                    pos += written
            finally:
                os.close(fd)
            return PartInfo(
                number=number, size=len(data), etag=f"{offset:x}-{len(data):x}", checksums=checksums
            )

        return await self._run(run, key=key, operation="upload_part")

    async def complete_upload(
        self,
        key: str,
        upload_id: str,
        parts: Sequence[PartInfo],
        *,
        if_not_exists: bool,
        checksums: Mapping[str, str],
    ) -> ObjectInfo:
        def run() -> ObjectInfo:
            directory = self._check_upload(key, upload_id, "complete_upload")
            info = self._upload_info(upload_id) or {}
            offset = 0
            for part in parts:
                if part.etag != f"{offset:x}-{part.size:x}":
                    raise ObjectError(
                        f"part {part.number} does not follow the parts before it",
                        key=key,
                        store=self.url,
                        operation="complete_upload",
                    )
                offset += part.size
            data = os.path.join(directory, "data")
            tmp = os.path.join(self._tmp, f"{os.getpid()}-{upload_id}")
            os.rename(data, tmp)
            fd = os.open(tmp, os.O_WRONLY | os.O_CLOEXEC)
            os.ftruncate(fd, offset)
            content_type = info.get("content_type")
            result = self._finalize(
                tmp,
                fd,
                key,
                if_not_exists=if_not_exists,
                checksums=checksums,
                content_type=content_type if isinstance(content_type, str) else None,
                operation="complete_upload",
            )
            shutil.rmtree(directory, ignore_errors=True)
            return result

        return await self._run(run, key=key, operation="complete_upload")

    async def abort_upload(self, key: str, upload_id: str) -> None:
        def run() -> None:
            if upload_id.isalnum():
                shutil.rmtree(os.path.join(self._uploads, upload_id), ignore_errors=True)

        await self._run(run, key=key, operation="abort_upload")

    async def list_uploads(self, prefix: str) -> AsyncIterator[UploadInfo]:
        def run() -> list[UploadInfo]:
            found = []
            for upload_id in sorted(os.listdir(self._uploads)):
                info = self._upload_info(upload_id)
                key = info.get("key") if info else None
                if isinstance(key, str) and key.startswith(prefix):
                    started = info.get("initiated") if info else None
                    found.append(
                        UploadInfo(
                            key=key,
                            upload_id=upload_id,
                            initiated=datetime.fromisoformat(started)
                            if isinstance(started, str)
                            else None,
                        )
                    )
            return found

        for upload in await self._run(run, key=prefix, operation="list_uploads"):
            yield upload


def _copy_chunk(src: int, dst: int) -> int:
    """Copy the next chunk from ``src`` to ``dst`` (in the kernel where it can); 0 at the end."""
    if hasattr(os, "copy_file_range"):
        with contextlib.suppress(OSError):
            return os.copy_file_range(src, dst, 64 << 20)
    data = os.read(src, 8 << 20)
    if data:
        os.write(dst, data)
    return len(data)
