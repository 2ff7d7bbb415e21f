"""State and wire helpers of the GCS resumable upload protocol, as the GCS backend drives it.

A session accepts chunks in order, each a multiple of 256 KiB except the last, sent as
``PUT <session URI>`` with ``Content-Range: bytes FIRST-LAST/*``; the service answers 308 with
``Range: bytes=0-N`` (the bytes it has persisted; no header means none). The final request
carries the total (``bytes FIRST-LAST/TOTAL``, or ``bytes */TOTAL`` with an empty body).
After a failure the client asks ``bytes */*`` and resumes from the persisted offset: the
service may have kept all, part or none of an interrupted chunk.
"""

from __future__ import annotations

import dataclasses
import json
import re
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from .._backend import Buffer
from .._exceptions import AlreadyExistsError, NotFoundError, UploadError
from .._types import ObjectInfo, PartInfo, UploadInfo
from ._gcs_client import META_PREFIX, NATIVE, GCSClient
from ._gcs_errors import raise_for_status

__all__ = [
    "ALIGNMENT",
    "ResumableSession",
    "ResumableUploads",
    "body_chunks",
    "goog_hash",
    "persisted_bytes",
]

ALIGNMENT = 256 * 1024
# Body buffers are written in slices so aiohttp waits for the socket between writes instead
# of queueing a whole part in the transport's buffer (a second copy of it).
WRITE_SLICE = 1024 * 1024

_RANGE = re.compile(r"^bytes=0-(\d+)$")


@dataclasses.dataclass(kw_only=True, slots=True)
class ResumableSession:
    """One resumable session, kept in the backend (the URI never leaves it).

    Attributes:
        key: the object name being written.
        uri: the session URI; whoever holds it may write the object, so it is a secret.
        if_not_exists: whether the session was started with ``ifGenerationMatch=0``.
        persisted: bytes the service has confirmed.
        uncertain: a request failed or was cancelled part-way, so ``persisted`` may be stale
            and the service must be asked before anything is sent.
        tail: the unaligned end of the last part, held back until completion because only
            the final request may carry a chunk that is not a multiple of 256 KiB.
        tail_offset: where ``tail`` starts in the object.
    """

    key: str
    uri: str
    if_not_exists: bool
    persisted: int = 0
    uncertain: bool = False
    tail: bytes = b""
    tail_offset: int = 0


def persisted_bytes(headers: Mapping[str, str]) -> int:
    """Bytes persisted according to a 308 answer's ``Range`` header (absent: none)."""
    value = headers.get("Range")
    if not value:
        return 0
    match = _RANGE.match(value.strip())
    if match is None:
        raise ValueError(f"unexpected Range header in a resumable upload answer: {value!r}")
    return int(match.group(1)) + 1


def goog_hash(checksums: Mapping[str, str]) -> str | None:
    """The ``X-Goog-Hash`` value for the checksums GCS can verify (``crc32c``, ``md5``)."""
    parts = [f"{name}={checksums[name]}" for name in ("crc32c", "md5") if name in checksums]
    return ",".join(parts) or None


async def body_chunks(*pieces: bytes | bytearray | memoryview) -> AsyncIterator[Any]:
    """Stream ``pieces`` as one request body, in bounded slices, without joining them."""
    for piece in pieces:
        view = memoryview(piece).cast("B")
        for start in range(0, len(view), WRITE_SLICE):
            yield view[start : start + WRITE_SLICE]


class ResumableUploads(GCSClient):
    """The backend's multipart triple: one resumable session per upload (a base of
    GCSBackend)."""

    async def create_upload(
        self,
        key: str,
        *,
        content_type: str | None,
        checksum_algorithm: str | None,
        if_not_exists: bool = False,
    ) -> str:
        """Start a resumable session; the upload id is opaque (the session URI stays here).

        ``if_not_exists`` applies ``ifGenerationMatch=0`` to the session itself (atomic).
        Without it, ``complete_upload(if_not_exists=True)`` falls back to a check just before
        finalising, which a concurrent writer can race.
        """
        content_type = content_type or "application/octet-stream"
        params = {"uploadType": "resumable"}
        if if_not_exists:
            params["ifGenerationMatch"] = "0"
        headers = {
            "Content-Type": "application/json; charset=UTF-8",
            "X-Upload-Content-Type": content_type,
        }
        body = json.dumps({"name": key, "contentType": content_type})
        url = f"{self._root}/upload/storage/v1/b/{self._bucket}/o"
        with self._boundary("upload", key, conditional_create=if_not_exists):
            response = await self._send("POST", url, params=params, headers=headers, data=body)
            response.release()
        location = response.headers.get("Location")
        if not location:
            raise UploadError(
                "the service started no resumable session (no Location header)",
                key=key,
                store=self.url,
                operation="upload",
            )
        upload_id = f"gcs-{secrets.token_urlsafe(12)}"
        self._uploads[upload_id] = ResumableSession(
            key=key, uri=location, if_not_exists=if_not_exists
        )
        return upload_id

    def _session_for(self, key: str, upload_id: str, operation: str) -> ResumableSession:
        session = self._uploads.get(upload_id)
        if session is None or session.key != key:
            raise NotFoundError(
                f"unknown upload id {upload_id!r} (completed, aborted, or from another "
                "process: GCS sessions are tracked in memory)",
                key=key,
                store=self.url,
                operation=operation,
            )
        return session

    async def _put_session(
        self, session: ResumableSession, body: Any, content_range: str, operation: str
    ) -> tuple[int, dict[str, Any] | None]:
        """One PUT to the session: ``(persisted, None)`` on 308, ``(size, resource)`` when done."""
        headers = {"Content-Range": content_range}
        session.uncertain = True
        with self._boundary(operation, session.key, redact=True):
            response = await self._send("PUT", session.uri, headers=headers, data=body)
            if response.status == 308:
                response.release()
                persisted = persisted_bytes(response.headers)
                session.persisted, session.uncertain = persisted, False
                return persisted, None
            resource: dict[str, Any] = await response.json(content_type=None)
        session.uncertain = False
        return int(resource.get("size") or 0), resource

    async def _query(self, session: ResumableSession, operation: str) -> dict[str, Any] | None:
        """Ask the service how much it kept (``bytes */*``); the resource if already final."""
        _, resource = await self._put_session(session, b"", "bytes */*", operation)
        return resource

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
        """Send the part as the next chunk(s) of the session, resuming from the service's
        offset when an earlier attempt failed: bytes already persisted are not sent again.

        The unaligned end of the last part is held until :meth:`complete_upload`.
        """
        session = self._session_for(key, upload_id, "upload")
        view = memoryview(data).cast("B")
        size = len(view)
        if session.tail and session.tail_offset + len(session.tail) == offset:
            # A short part that was not the last after all: send it with this one.
            view = memoryview(session.tail + bytes(view))
            offset = session.tail_offset
        session.tail = b""
        aligned = len(view) - len(view) % ALIGNMENT
        stale = session.uncertain or session.persisted != offset
        if stale and await self._query(session, "upload") is not None:
            raise self._upload_error(session, upload_id, "the session was already finalised")
        if session.persisted < offset:
            raise self._upload_error(
                session,
                upload_id,
                f"part {number} starts at byte {offset} but the service holds "
                f"{session.persisted}: an earlier part is missing",
            )
        while session.persisted < offset + aligned:
            sent_from = session.persisted
            first = sent_from - offset
            chunk_range = f"bytes {sent_from}-{offset + aligned - 1}/*"
            persisted, resource = await self._put_session(
                session, body_chunks(view[first:aligned]), chunk_range, "upload"
            )
            if resource is not None or persisted <= sent_from:
                raise self._upload_error(
                    session, upload_id, f"the service accepted no bytes of part {number}"
                )
        if aligned < len(view):
            session.tail = bytes(view[aligned:])
            session.tail_offset = offset + aligned
        return PartInfo(
            number=number, size=size, etag=str(offset + len(view)), checksums=dict(checksums)
        )

    def _upload_error(self, session: ResumableSession, upload_id: str, message: str) -> UploadError:
        return UploadError(
            message, upload_id=upload_id, key=session.key, store=self.url, operation="upload"
        )

    async def complete_upload(
        self,
        key: str,
        upload_id: str,
        parts: Sequence[PartInfo],
        *,
        if_not_exists: bool,
        checksums: Mapping[str, str],
    ) -> ObjectInfo:
        """Finalise the session with ``X-Goog-Hash`` so the service verifies the object."""
        session = self._session_for(key, upload_id, "upload")
        total = sum(part.size for part in parts)
        if session.uncertain:
            resource = await self._query(session, "upload")
            if resource is not None:  # an earlier completion got through
                return await self._finish(upload_id, resource, checksums)
        if if_not_exists:
            # The session's ifGenerationMatch=0 is the atomic guard on GCS; this early check
            # also covers emulators that ignore the condition on resumable sessions.
            await self._refuse_existing(key)
        held = session.tail if session.tail_offset == session.persisted else b""
        if session.persisted + len(held) != total:
            raise self._upload_error(
                session,
                upload_id,
                f"the parts add up to {total} bytes but the service holds "
                f"{session.persisted + len(held)}",
            )
        content_range = (
            f"bytes {session.persisted}-{total - 1}/{total}" if held else f"bytes */{total}"
        )
        headers = {"Content-Range": content_range}
        hashes = goog_hash(checksums)
        if hashes:
            headers["X-Goog-Hash"] = hashes
        session.uncertain = True
        conditional = if_not_exists or session.if_not_exists
        with self._boundary("upload", key, conditional_create=conditional, redact=True):
            response = await self._send("PUT", session.uri, headers=headers, data=held)
            if response.status == 308:
                response.release()
                raise self._upload_error(session, upload_id, "the service did not finalise")
            resource = await response.json(content_type=None)
        return await self._finish(upload_id, resource, checksums)

    async def _refuse_existing(self, key: str) -> None:
        try:
            with self._boundary("upload", key):
                response = await self._send("GET", self._object_url(key))
                response.release()
        except NotFoundError:
            return
        raise AlreadyExistsError(
            "the object already exists", key=key, store=self.url, operation="upload"
        )

    async def _finish(
        self, upload_id: str, resource: Mapping[str, Any], checksums: Mapping[str, str]
    ) -> ObjectInfo:
        self._uploads.pop(upload_id, None)
        info = await self._verify_stored(resource, checksums, "upload")
        extra = {META_PREFIX + alg: value for alg, value in checksums.items() if alg not in NATIVE}
        if extra and info.version:
            await self._record_extra(info, extra)
        return info

    async def _record_extra(self, info: ObjectInfo, extra: Mapping[str, str]) -> None:
        """Record non-native checksums as metadata of exactly the generation just written."""
        body = json.dumps({"metadata": dict(extra)})
        params = {"ifGenerationMatch": info.version or ""}
        with self._boundary("upload", info.key):
            response = await self._send(
                "PATCH",
                self._object_url(info.key),
                params=params,
                headers={"Content-Type": "application/json"},
                data=body,
            )
            response.release()

    async def abort_upload(self, key: str, upload_id: str) -> None:
        """Cancel the session (``DELETE`` on its URI); unknown ids are ignored."""
        session = self._uploads.get(upload_id)
        if session is None:
            return
        sess, _ = self._client()
        with self._boundary("abort", key, redact=True):
            # 499 is GCS's answer to a cancelled session; 404/410: already gone; some
            # emulators cannot cancel (501) and let the session expire instead.
            response = await sess.request(
                "DELETE",
                session.uri,
                headers=await self._auth(),
                timeout=self._timeout,
                allow_redirects=False,
            )
            response.release()
            if response.status not in (200, 204, 404, 410, 499, 501):
                await raise_for_status(response)
        self._uploads.pop(upload_id, None)

    async def list_uploads(self, prefix: str) -> AsyncIterator[UploadInfo]:
        """Always empty: GCS offers no way to list resumable sessions (they expire in a week
        and cost nothing until finalised)."""
        return
        yield  # an async generator that yields nothing
