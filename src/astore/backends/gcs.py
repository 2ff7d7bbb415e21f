"""Google Cloud Storage backend (``gs://BUCKET/PREFIX``), on gcloud-aio-storage and aiohttp.

gcloud-aio-storage provides authentication, metadata, listing, deletion, rewrite (copy) and
signed URLs. Its uploads re-send whole bodies, read whole objects into memory and apply a
*total* timeout to the transfer, so the backend sends uploads and ranged reads itself on the
same aiohttp session, with timeouts per socket read:

- ``put_object``: one multipart upload (metadata + body) with ``crc32c``/``md5Hash`` in the
  metadata, which the service verifies; ``ifGenerationMatch=0`` for create-only writes.
- the multipart triple: one resumable session driven chunk by chunk (see
  :mod:`._gcs_resumable`); a retried ``upload_part`` asks the service how much it kept and
  sends only the rest; completion carries ``X-Goog-Hash``.
- ``get_range``: ``alt=media`` with a ``Range`` header, pinned with ``ifGenerationMatch``.

The ETag astore reports for a GCS object is its **generation** (a decimal string), because
the generation is what GCS preconditions accept; ``ObjectInfo.version`` is the same value.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, cast

import aiohttp
import anyio
from gcloud.aio.storage import Blob

from .._backend import Backend, Buffer
from .._exceptions import (
    ConfigurationError,
    InvalidRangeError,
    NotFoundError,
    ObjectError,
    PreconditionFailedError,
    UnsupportedOperationError,
)
from .._types import Capabilities, ListPage, ObjectInfo
from ._gcs_client import DEFAULT_TIMEOUT, META_PREFIX, NATIVE
from ._gcs_resumable import ALIGNMENT, ResumableUploads, body_chunks

__all__ = ["DEFAULT_TIMEOUT", "GCSBackend"]

# GCS has no batch delete in gcloud-aio-storage: deletes go one request each, this many at once.
DELETE_CONCURRENCY = 16


class GCSBackend(ResumableUploads, Backend):
    """One GCS bucket.

    Args:
        bucket: the bucket name.
        max_connections: connections the session may open (the store's request slots).
        service_file: a service-account (or other credentials) JSON file; ``None`` uses
            Application Default Credentials.
        project: the project (only used for bookkeeping; object calls need none).
        emulator_host: an emulator's root URL (``http://127.0.0.1:4443``); default from
            ``STORAGE_EMULATOR_HOST``. Turns off authentication and TLS verification: set it
            only for an emulator.
        timeout: seconds a connect or a single socket read may take (not the whole transfer).
        service_account_email: account to sign URLs as through the IAM API when the
            credentials hold no private key.

    Example:
        >>> backend = GCSBackend("my-bucket", max_connections=16)
        >>> backend.url
        'gs://my-bucket'
    """

    capabilities = Capabilities(
        min_part_size=ALIGNMENT,
        max_part_size=5 * 1024**3,
        # A resumable session has no part limit; objects are capped at 5 TiB.
        max_parts=1_000_000,
        part_alignment=ALIGNMENT,
        parallel_parts=False,
        conditional_writes=True,
        native_checksums=frozenset({"crc32c", "md5"}),
        signed_urls=True,
    )

    # -- objects -------------------------------------------------------------------------

    async def head(self, key: str) -> ObjectInfo:
        """Object metadata; ``etag`` and ``version`` are the generation."""
        _, storage = self._client()
        with self._boundary("stat", key):
            resource = await storage.download_metadata(
                self._bucket, key, headers={}, timeout=self._lib_timeout
            )
        return self._info(resource)

    async def get_range(
        self,
        key: str,
        start: int,
        end: int | None,
        *,
        etag: str | None,
        chunk_size: int,
    ) -> AsyncIterator[bytes]:
        """Stream ``[start, end)``; with ``etag`` (a generation) the read is pinned to it."""
        if end is not None and end <= start:
            return
        # Stored bytes as they are (no transcoding), so they match the stored checksums.
        headers = {"Accept-Encoding": "gzip"}
        if start > 0 or end is not None:
            last = "" if end is None else str(end - 1)
            headers["Range"] = f"bytes={start}-{last}"
        params = {"alt": "media"}
        if etag is not None:
            params["ifGenerationMatch"] = etag
        with self._boundary("get", key):
            response = await self._send(
                "GET", self._object_url(key), params=params, headers=headers, auto_decompress=False
            )
        done = False
        try:
            self._check_read(response, key, start, etag)
            while True:
                with self._boundary("get", key):
                    chunk = await response.content.read(chunk_size)
                if not chunk:
                    break
                yield chunk
            done = True
        finally:
            # A half-read body cannot go back to the pool; a fully read one can.
            if done:
                response.release()
            else:
                response.close()

    def _check_read(
        self, response: aiohttp.ClientResponse, key: str, start: int, etag: str | None
    ) -> None:
        where = {"key": key, "store": self.url, "operation": "get"}
        generation = response.headers.get("X-Goog-Generation")
        # Servers that ignore ifGenerationMatch on reads (emulators) still name the generation.
        if etag is not None and generation is not None and generation != etag:
            raise PreconditionFailedError(
                f"the object changed (generation {generation}, expected {etag})", **where
            )
        content_range = response.headers.get("Content-Range", "")
        if content_range.startswith("bytes ") and "-" in content_range:
            first, _, rest = content_range[6:].partition("-")
            last = rest.partition("/")[0]
            if first.isdigit() and last.isdigit() and int(last) < int(first):
                raise InvalidRangeError(f"range starting at {start} lies past the end", **where)
        if start > 0 and response.status == 200:
            raise InvalidRangeError("the service ignored the requested range", **where)

    async def put_object(
        self,
        key: str,
        data: Buffer,
        *,
        if_not_exists: bool,
        checksums: Mapping[str, str],
        content_type: str | None,
    ) -> ObjectInfo:
        """One multipart upload (metadata + body); the service verifies crc32c/md5."""
        content_type = content_type or "application/octet-stream"
        metadata = self._upload_metadata(key, content_type, checksums)
        boundary = secrets.token_hex(16)
        head = (
            f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
            f"{json.dumps(metadata)}\r\n--{boundary}\r\nContent-Type: {content_type}\r\n\r\n"
        ).encode()
        tail = f"\r\n--{boundary}--\r\n".encode()
        size = len(head) + memoryview(data).nbytes + len(tail)
        params = {"uploadType": "multipart"}
        if if_not_exists:
            params["ifGenerationMatch"] = "0"
        headers = {
            "Content-Type": f"multipart/related; boundary={boundary}",
            "Content-Length": str(size),
        }
        url = f"{self._root}/upload/storage/v1/b/{self._bucket}/o"
        with self._boundary("put", key, conditional_create=if_not_exists):
            response = await self._send(
                "POST", url, params=params, headers=headers, data=body_chunks(head, data, tail)
            )
            resource = await response.json(content_type=None)
        return await self._verify_stored(resource, checksums, "put")

    def _upload_metadata(
        self, key: str, content_type: str, checksums: Mapping[str, str]
    ) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": key, "contentType": content_type}
        extra = {}
        for alg, value in checksums.items():
            if alg in NATIVE:
                metadata[NATIVE[alg]] = value
            else:
                extra[META_PREFIX + alg] = value
        if extra:
            metadata["metadata"] = extra
        return metadata

    async def list_pages(
        self,
        prefix: str,
        *,
        delimiter: str | None,
        start_after: str | None,
        page_size: int,
    ) -> AsyncIterator[ListPage]:
        """Stream listing pages; ``start_after`` maps to ``startOffset`` minus the exact key."""
        _, storage = self._client()
        params = {"maxResults": str(page_size)}
        if prefix:
            params["prefix"] = prefix
        if delimiter:
            params["delimiter"] = delimiter
        if start_after:
            params["startOffset"] = start_after  # inclusive, hence the filter below
        while True:
            with self._boundary("list", prefix or None):
                page = await storage.list_objects(
                    self._bucket, params=dict(params), headers={}, timeout=self._lib_timeout
                )
            objects = [
                self._info(item)
                for item in page.get("items", [])
                if start_after is None or item["name"] > start_after
            ]
            prefixes = [p for p in page.get("prefixes", []) if isinstance(p, str)]
            if objects or prefixes:
                yield ListPage(objects=objects, prefixes=prefixes)
            token = page.get("nextPageToken")
            if not token:
                return
            params["pageToken"] = token

    async def delete_many(self, keys: Sequence[str]) -> dict[str, ObjectError]:
        """Delete each key (``DELETE_CONCURRENCY`` at a time); missing keys are not errors."""
        _, storage = self._client()
        failed: dict[str, ObjectError] = {}
        pending = iter(keys)

        async def worker() -> None:
            for key in pending:
                try:
                    with self._boundary("delete", key):
                        await storage.delete(
                            self._bucket, key, headers={}, timeout=self._lib_timeout
                        )
                except NotFoundError:
                    pass
                except ObjectError as exc:
                    failed[key] = exc

        async with anyio.create_task_group() as tg:
            for _ in range(min(DELETE_CONCURRENCY, len(keys))):
                tg.start_soon(worker)
        return failed

    async def copy(self, src: str, dst: str, *, if_not_exists: bool) -> ObjectInfo:
        """Rewrite ``src`` to ``dst`` (looping until done); checksums travel with the data."""
        _, storage = self._client()
        params = {"ifGenerationMatch": "0"} if if_not_exists else {}
        try:
            with self._boundary("copy", dst, conditional_create=if_not_exists):
                result = await storage.copy(
                    self._bucket,
                    src,
                    self._bucket,
                    new_name=dst,
                    params=params,
                    headers={},
                    timeout=self._lib_timeout,
                )
        except NotFoundError as exc:
            raise NotFoundError(exc.message, key=src, store=self.url, operation="copy") from exc
        resource = result.get("resource") or result
        return self._info(resource)

    # -- signed URLs ---------------------------------------------------------------------

    async def signed_url(self, key: str, *, method: str, expires: float) -> str:
        """A V4 signed URL for ``storage.googleapis.com``, signed with the service account's
        private key, or through the IAM API as ``service_account_email``.

        Raises:
            UnsupportedOperationError: the credentials hold no key and no
                ``service_account_email`` was configured (e.g. on an emulator).
            ConfigurationError: ``expires`` is not within (0, 7 days].
        """
        session, storage = self._client()
        if not 0 < expires <= 7 * 24 * 3600:
            raise ConfigurationError(f"expires must be within (0, 604800] s, not {expires!r}")
        service_data = getattr(storage.token, "service_data", None) or {}
        has_key = bool(service_data.get("client_email") and service_data.get("private_key"))
        if not has_key and (self._emulator is not None or not self._service_account_email):
            raise UnsupportedOperationError(
                f"{self.url}: these credentials cannot sign URLs; use a service-account key "
                "file (service_file=) or pass service_account_email= to sign through IAM"
            )
        blob = Blob(storage.get_bucket(self._bucket), key, {"size": 0})
        with self._boundary("signed_url", key):
            url: str = await blob.get_signed_url(
                max(1, int(expires)),
                http_method=method.upper(),
                service_account_email=self._service_account_email,
                session=cast(Any, session),
            )
        return url
