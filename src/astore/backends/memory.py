"""The in-process memory backend: S3 semantics without a server.

Stores live in a process-wide registry by name, so ``memory://name`` opened twice sees the same
objects. Everything S3 enforces is enforced here too: conditional creates, pinned reads,
multipart rules (parts replace parts of the same number; completion checks the list),
pagination and delimiters. Suited to unit tests and examples; nothing survives the process.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime

from .._backend import Backend, Buffer
from .._exceptions import (
    AlreadyExistsError,
    InvalidRangeError,
    NotFoundError,
    ObjectError,
    PreconditionFailedError,
    UploadError,
)
from .._types import Capabilities, ListPage, ObjectInfo, PartInfo, UploadInfo

__all__ = ["MemoryBackend"]


@dataclasses.dataclass(frozen=True, slots=True)
class _Object:
    data: bytes
    etag: str
    modified: datetime
    checksums: Mapping[str, str]
    content_type: str | None


@dataclasses.dataclass(slots=True)
class _Upload:
    key: str
    initiated: datetime
    content_type: str | None
    parts: dict[int, tuple[bytes, str]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True)
class _Container:
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    objects: dict[str, _Object] = dataclasses.field(default_factory=dict)
    uploads: dict[str, _Upload] = dataclasses.field(default_factory=dict)


_REGISTRY: dict[str, _Container] = {}
_REGISTRY_LOCK = threading.Lock()
_ETAGS = itertools.count(1)


def _now() -> datetime:
    return datetime.now(UTC)


class MemoryBackend(Backend):
    """Objects in a dict shared by every store of the same name in this process."""

    capabilities = Capabilities(native_checksums=frozenset({"crc32c", "md5", "sha256"}))

    def __init__(self, name: str) -> None:
        self.name = name
        with _REGISTRY_LOCK:
            self._c = _REGISTRY.setdefault(name, _Container())

    @property
    def url(self) -> str:
        return f"memory://{self.name}"

    def _missing(self, key: str, operation: str) -> NotFoundError:
        return NotFoundError("no such object", key=key, store=self.url, operation=operation)

    def _info(self, key: str, obj: _Object) -> ObjectInfo:
        return ObjectInfo(
            key=key,
            size=len(obj.data),
            etag=obj.etag,
            last_modified=obj.modified,
            checksums=dict(obj.checksums),
            content_type=obj.content_type,
        )

    def _store(
        self,
        key: str,
        data: bytes,
        *,
        if_not_exists: bool,
        checksums: Mapping[str, str],
        content_type: str | None,
        operation: str,
    ) -> ObjectInfo:
        obj = _Object(data, f"m{next(_ETAGS)}", _now(), dict(checksums), content_type)
        with self._c.lock:
            if if_not_exists and key in self._c.objects:
                raise AlreadyExistsError(
                    "the object already exists", key=key, store=self.url, operation=operation
                )
            self._c.objects[key] = obj
        return self._info(key, obj)

    async def head(self, key: str) -> ObjectInfo:
        obj = self._c.objects.get(key)
        if obj is None:
            raise self._missing(key, "head")
        return self._info(key, obj)

    async def get_range(
        self, key: str, start: int, end: int | None, *, etag: str | None, chunk_size: int
    ) -> AsyncIterator[bytes]:
        obj = self._c.objects.get(key)
        if obj is None:
            raise self._missing(key, "get")
        if etag is not None and obj.etag != etag:
            raise PreconditionFailedError(
                "the object changed while it was read", key=key, store=self.url, operation="get"
            )
        stop = len(obj.data) if end is None else end
        if start > len(obj.data) or stop > len(obj.data):
            raise InvalidRangeError(
                f"range {start}-{stop} outside {len(obj.data)} bytes",
                key=key,
                store=self.url,
                operation="get",
            )
        view = memoryview(obj.data)
        for pos in range(start, stop, chunk_size):
            yield bytes(view[pos : min(pos + chunk_size, stop)])

    async def put_object(
        self,
        key: str,
        data: Buffer,
        *,
        if_not_exists: bool,
        checksums: Mapping[str, str],
        content_type: str | None,
    ) -> ObjectInfo:
        return self._store(
            key,
            bytes(data),
            if_not_exists=if_not_exists,
            checksums=checksums,
            content_type=content_type,
            operation="put",
        )

    async def list_pages(
        self, prefix: str, *, delimiter: str | None, start_after: str | None, page_size: int
    ) -> AsyncIterator[ListPage]:
        keys = sorted(k for k in list(self._c.objects) if k.startswith(prefix))
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        last_prefix: str | None = None
        for key in keys:
            if start_after is not None and key <= start_after:
                continue
            if delimiter:
                cut = key.find(delimiter, len(prefix))
                if cut >= 0:
                    common = key[: cut + len(delimiter)]
                    if common != last_prefix and (start_after is None or common > start_after):
                        prefixes.append(common)
                        last_prefix = common
                    else:
                        continue
                    if len(objects) + len(prefixes) >= page_size:
                        yield ListPage(objects=objects, prefixes=prefixes)
                        objects, prefixes = [], []
                    continue
            obj = self._c.objects.get(key)
            if obj is None:
                continue
            objects.append(self._info(key, obj))
            if len(objects) + len(prefixes) >= page_size:
                yield ListPage(objects=objects, prefixes=prefixes)
                objects, prefixes = [], []
        if objects or prefixes:
            yield ListPage(objects=objects, prefixes=prefixes)

    async def delete_many(self, keys: Sequence[str]) -> dict[str, ObjectError]:
        with self._c.lock:
            for key in keys:
                self._c.objects.pop(key, None)
        return {}

    async def copy(self, src: str, dst: str, *, if_not_exists: bool) -> ObjectInfo:
        obj = self._c.objects.get(src)
        if obj is None:
            raise self._missing(src, "copy")
        return self._store(
            dst,
            obj.data,
            if_not_exists=if_not_exists,
            checksums=obj.checksums,
            content_type=obj.content_type,
            operation="copy",
        )

    async def create_upload(
        self,
        key: str,
        *,
        content_type: str | None,
        checksum_algorithm: str | None,
        if_not_exists: bool = False,
    ) -> str:
        upload_id = uuid.uuid4().hex
        with self._c.lock:
            self._c.uploads[upload_id] = _Upload(key, _now(), content_type)
        return upload_id

    def _upload(self, key: str, upload_id: str, operation: str) -> _Upload:
        upload = self._c.uploads.get(upload_id)
        if upload is None or upload.key != key:
            raise NotFoundError(
                f"no multipart upload {upload_id!r}", key=key, store=self.url, operation=operation
            )
        return upload

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
        upload = self._upload(key, upload_id, "upload_part")
        etag = f"p{next(_ETAGS)}"
        upload.parts[number] = (bytes(data), etag)
        return PartInfo(number=number, size=len(data), etag=etag, checksums=dict(checksums))

    async def complete_upload(
        self,
        key: str,
        upload_id: str,
        parts: Sequence[PartInfo],
        *,
        if_not_exists: bool,
        checksums: Mapping[str, str],
    ) -> ObjectInfo:
        upload = self._upload(key, upload_id, "complete_upload")
        chunks = []
        for part in parts:
            stored = upload.parts.get(part.number)
            if stored is None or stored[1] != part.etag:
                raise UploadError(
                    f"part {part.number} was not uploaded or was replaced",
                    upload_id=upload_id,
                    key=key,
                    store=self.url,
                    operation="complete_upload",
                )
            chunks.append(stored[0])
        info = self._store(
            key,
            b"".join(chunks),
            if_not_exists=if_not_exists,
            checksums=checksums,
            content_type=upload.content_type,
            operation="complete_upload",
        )
        with self._c.lock:
            self._c.uploads.pop(upload_id, None)
        return info

    async def abort_upload(self, key: str, upload_id: str) -> None:
        with self._c.lock:
            self._c.uploads.pop(upload_id, None)

    async def list_uploads(self, prefix: str) -> AsyncIterator[UploadInfo]:
        for upload_id, upload in sorted(self._c.uploads.items(), key=lambda kv: kv[1].key):
            if upload.key.startswith(prefix):
                yield UploadInfo(key=upload.key, upload_id=upload_id, initiated=upload.initiated)
