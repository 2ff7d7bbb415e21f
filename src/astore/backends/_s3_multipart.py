"""Multipart uploads on S3: the create / part / complete / abort / list primitives."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from .._backend import Buffer
from .._exceptions import IntegrityError, NotFoundError
from .._types import ObjectInfo, PartInfo, UploadInfo
from ._s3_support import body_of, checksum_params, quote_etag, strip_etag, utc

__all__ = ["S3Multipart"]


class S3Multipart:
    """The multipart half of :class:`~astore.backends.s3.S3Backend` (a mixin).

    The backend supplies the client (``_c``), the bucket, the error boundary (``_errors``)
    and ``_upload_algorithms``: the checksum algorithm each open upload was created with,
    because S3 rejects part checksums of another algorithm.
    """

    bucket: str
    _upload_algorithms: dict[str, str | None]

    @property
    def _c(self) -> Any:
        raise NotImplementedError

    def _errors(
        self,
        key: str | None,
        operation: str,
        *,
        conditional_create: bool = False,
        upload_id: str | None = None,
    ) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    async def create_upload(
        self,
        key: str,
        *,
        content_type: str | None,
        checksum_algorithm: str | None,
        if_not_exists: bool = False,
    ) -> str:
        """CreateMultipartUpload; CRC32C uploads use S3's FULL_OBJECT checksum type.

        ``if_not_exists`` needs nothing here: S3 enforces it at CompleteMultipartUpload.
        """
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if content_type is not None:
            params["ContentType"] = content_type
        if checksum_algorithm == "crc32c":
            # FULL_OBJECT: S3 records the CRC32C of the whole object (not of the part CRCs),
            # verifies the one astore sends at completion, and returns it to any reader.
            params["ChecksumAlgorithm"] = "CRC32C"
            params["ChecksumType"] = "FULL_OBJECT"
        elif checksum_algorithm == "sha256":
            params["ChecksumAlgorithm"] = "SHA256"  # composite: verifies parts only
        with self._errors(key, "create_upload"):
            response = await self._c.create_multipart_upload(**params)
        upload_id: str = response["UploadId"]
        self._upload_algorithms[upload_id] = checksum_algorithm
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
        """UploadPart, S3 verifying the part's checksum."""
        body, size = body_of(data), memoryview(data).nbytes
        algorithm = self._upload_algorithms.get(upload_id, "auto")
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": key,
            "UploadId": upload_id,
            "PartNumber": number,
            "Body": body,
            "ContentLength": size,
            **checksum_params(checksums, algorithm=algorithm),
        }
        with self._errors(key, "upload_part", upload_id=upload_id):
            try:
                response = await self._c.upload_part(**params)
            finally:
                body.release()
        return PartInfo(
            number=number,
            size=size,
            etag=strip_etag(response.get("ETag")) or "",
            checksums=dict(checksums),
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
        """CompleteMultipartUpload with the whole object's CRC32C for S3 to verify and keep."""
        algorithm = self._upload_algorithms.get(upload_id, "auto")
        if algorithm == "auto":
            algorithm = "crc32c" if "crc32c" in checksums else None
        listed: list[dict[str, Any]] = []
        for part in parts:
            entry: dict[str, Any] = {"PartNumber": part.number, "ETag": quote_etag(part.etag)}
            if algorithm in ("crc32c", "sha256") and algorithm in part.checksums:
                entry["ChecksumCRC32C" if algorithm == "crc32c" else "ChecksumSHA256"] = (
                    part.checksums[algorithm]
                )
            listed.append(entry)
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": key,
            "UploadId": upload_id,
            "MultipartUpload": {"Parts": listed},
        }
        if algorithm == "crc32c" and "crc32c" in checksums:
            params["ChecksumType"] = "FULL_OBJECT"
            params["ChecksumCRC32C"] = checksums["crc32c"]
        if if_not_exists:
            params["IfNoneMatch"] = "*"
        with self._errors(
            key, "complete_upload", conditional_create=if_not_exists, upload_id=upload_id
        ):
            response = await self._c.complete_multipart_upload(**params)
        self._upload_algorithms.pop(upload_id, None)
        stored = response.get("ChecksumCRC32C")
        if "ChecksumType" in params and not stored:
            # The service did not say what it assembled: ask (one HEAD per multipart upload).
            with self._errors(key, "complete_upload"):
                head = await self._c.head_object(
                    Bucket=self.bucket, Key=key, ChecksumMode="ENABLED"
                )
            if head.get("ChecksumType") == "FULL_OBJECT":
                stored = head.get("ChecksumCRC32C")
        if (
            "ChecksumType" in params
            and isinstance(stored, str)
            and stored
            and "-" not in stored
            and stored != checksums["crc32c"]
        ):
            # S3 rejects this itself; services that do not verify report what they stored.
            with contextlib.suppress(Exception), self._errors(key, "complete_upload"):
                await self._c.delete_object(Bucket=self.bucket, Key=key)
            raise IntegrityError(
                f"the service assembled bytes whose CRC32C ({stored}) is not the one sent "
                f"({checksums['crc32c']}); the object was deleted",
                key=key,
                store=f"s3://{self.bucket}",
                operation="complete_upload",
            )
        recorded: dict[str, str] = {}
        if "ChecksumType" in params and response.get("ChecksumType") != "COMPOSITE":
            recorded["crc32c"] = checksums["crc32c"]
        version = response.get("VersionId")
        return ObjectInfo(
            key=key,
            size=sum(p.size for p in parts),
            etag=strip_etag(response.get("ETag")),
            checksums=recorded,
            version=version if version and version != "null" else None,
        )

    async def abort_upload(self, key: str, upload_id: str) -> None:
        """AbortMultipartUpload; an unknown upload id is not an error."""
        self._upload_algorithms.pop(upload_id, None)
        with contextlib.suppress(NotFoundError), self._errors(key, "abort_upload"):
            await self._c.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)

    async def list_uploads(self, prefix: str) -> AsyncIterator[UploadInfo]:
        """ListMultipartUploads, following key/upload-id markers page by page."""
        params: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        while True:
            with self._errors(prefix or None, "list_uploads"):
                response = await self._c.list_multipart_uploads(**params)
            for item in response.get("Uploads", ()):
                yield UploadInfo(
                    key=item["Key"],
                    upload_id=item["UploadId"],
                    initiated=utc(item.get("Initiated")),
                )
            if not response.get("IsTruncated"):
                return
            params["KeyMarker"] = response.get("NextKeyMarker", "")
            params["UploadIdMarker"] = response.get("NextUploadIdMarker", "")
