"""Server-side copy of objects larger than CopyObject allows (5 GiB), part by part."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import anyio

from .._exceptions import AstoreError
from .._types import ObjectInfo
from ._s3_support import quote_etag, recorded_checksums, strip_etag, utc

if TYPE_CHECKING:
    from .s3 import S3Backend

__all__ = ["multipart_copy"]

# Part copies in flight: each is one server-side request, no bytes pass through us, but a
# bounded number keeps us within the store's connection budget.
_MAX_PARALLEL_COPIES = 8


async def multipart_copy(
    backend: S3Backend,
    client: Any,
    head: dict[str, Any],
    src: str,
    dst: str,
    *,
    if_not_exists: bool,
) -> ObjectInfo:
    """Copy ``src`` (described by its HeadObject ``head``) to ``dst`` with UploadPartCopy.

    Every part is pinned to the source's ETag, so a source overwritten mid-copy fails the copy
    instead of mixing versions. The source's metadata and content type are carried over, and
    a CRC32C source gets a FULL_OBJECT CRC32C that S3 checks against the source's at the end.
    On any failure the upload is aborted.
    """
    size = int(head["ContentLength"])
    etag = strip_etag(head.get("ETag"))
    checksums = recorded_checksums(head)
    crc = checksums.get("crc32c")
    params: dict[str, Any] = {
        "Bucket": backend.bucket,
        "Key": dst,
        "Metadata": dict(head.get("Metadata") or {}),
    }
    if head.get("ContentType"):
        params["ContentType"] = head["ContentType"]
    if crc is not None:
        params["ChecksumAlgorithm"] = "CRC32C"
        params["ChecksumType"] = "FULL_OBJECT"
    with backend._errors(dst, "copy"):
        upload_id: str = (await client.create_multipart_upload(**params))["UploadId"]
    part_size = backend.copy_part_size
    ranges = [
        (n + 1, pos, min(pos + part_size, size)) for n, pos in enumerate(range(0, size, part_size))
    ]
    results: dict[int, dict[str, Any]] = {}
    limiter = anyio.CapacityLimiter(max(1, min(_MAX_PARALLEL_COPIES, backend.max_connections)))

    async def copy_part(number: int, start: int, end: int) -> None:
        request: dict[str, Any] = {
            "Bucket": backend.bucket,
            "Key": dst,
            "UploadId": upload_id,
            "PartNumber": number,
            "CopySource": {"Bucket": backend.bucket, "Key": src},
            "CopySourceRange": f"bytes={start}-{end - 1}",
        }
        if etag is not None:
            request["CopySourceIfMatch"] = quote_etag(etag)
        async with limiter:
            with backend._errors(src, "copy", upload_id=upload_id):
                response = await client.upload_part_copy(**request)
        part: dict[str, Any] = {"PartNumber": number, "ETag": response["CopyPartResult"]["ETag"]}
        if crc is not None and response["CopyPartResult"].get("ChecksumCRC32C"):
            part["ChecksumCRC32C"] = response["CopyPartResult"]["ChecksumCRC32C"]
        results[number] = part

    try:
        try:
            async with anyio.create_task_group() as tg:
                for number, start, end in ranges:
                    tg.start_soon(copy_part, number, start, end)
        except BaseExceptionGroup as group:
            # Callers expect one astore error, as from any other primitive, not a group;
            # "from None" would erase its chain to the botocore error, so keep its cause.
            err = _first(group)
            raise err from err.__cause__
        complete: dict[str, Any] = {
            "Bucket": backend.bucket,
            "Key": dst,
            "UploadId": upload_id,
            "MultipartUpload": {"Parts": [results[n] for n in sorted(results)]},
        }
        if crc is not None:
            complete["ChecksumType"] = "FULL_OBJECT"
            complete["ChecksumCRC32C"] = crc  # S3 rejects the copy if the bytes differ
        if if_not_exists:
            complete["IfNoneMatch"] = "*"
        with backend._errors(dst, "copy", conditional_create=if_not_exists, upload_id=upload_id):
            response = await client.complete_multipart_upload(**complete)
    except BaseException:
        with anyio.CancelScope(shield=True):
            # The original failure matters more; list_uploads shows a leftover upload.
            with contextlib.suppress(AstoreError):
                await backend.abort_upload(dst, upload_id)
        raise
    version = response.get("VersionId")
    return ObjectInfo(
        key=dst,
        size=size,
        etag=strip_etag(response.get("ETag")),
        last_modified=utc(response.get("LastModified")),
        checksums=checksums,
        version=version if version and version != "null" else None,
        content_type=head.get("ContentType"),
    )


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first real failure in a (nested) exception group."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _first(exc)
        return exc
    return group
