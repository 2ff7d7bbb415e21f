"""The S3 backend: any S3-compatible service through aiobotocore.

The client is created in :meth:`S3Backend.open` on the running loop, with botocore's own
retries off (astore's retry policy is the only layer), checksums computed only when S3
requires them (astore sends its own CRC32C), unsigned payloads (the CRC32C protects the
body; SHA-256 signing would hash every byte a second time) and a connection pool as large as
the store's concurrency. Every call and every body read goes through one error boundary,
:func:`~astore.backends._s3_errors.s3_errors`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio
import anyio.to_thread
import botocore.handlers
from botocore import exceptions as bx

from .._backend import Backend, Buffer
from .._config import GiB, MiB
from .._exceptions import (
    AlreadyExistsError,
    ClosedError,
    ConfigurationError,
    InvalidRangeError,
    NotFoundError,
    ObjectError,
)
from .._types import Capabilities, ListPage, ObjectInfo
from ._s3_copy import multipart_copy
from ._s3_errors import client_error, error_code, s3_errors
from ._s3_multipart import S3Multipart
from ._s3_session import client_config, install_signature_filter, new_session
from ._s3_support import (
    META_PREFIX,
    body_of,
    check_float,
    check_str,
    checksum_params,
    quote_etag,
    recorded_checksums,
    strip_etag,
    utc,
)

__all__ = ["DEFAULT_CONNECT_TIMEOUT", "DEFAULT_READ_TIMEOUT", "S3Backend"]

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_READ_TIMEOUT = 60.0

_DELETE_BATCH = 1000
_MAX_EXPIRES = 7 * 24 * 3600  # SigV4 presigned URLs live at most a week
_PRESIGN_METHODS = {"GET": "get_object", "PUT": "put_object"}


class S3Backend(S3Multipart, Backend):
    """One S3 bucket (AWS or any S3-compatible service such as MinIO or moto).

    Args:
        bucket: the bucket name.
        max_connections: the most requests the store will have in flight; the HTTP connection
            pool is at least this large.
        endpoint_url: an S3-compatible service's URL (``None``: AWS).
        region: the bucket's region (``None``: from the AWS configuration, else us-east-1).
        profile: a profile of ``~/.aws/config`` to take credentials and settings from.
        addressing_style: ``"path"``, ``"virtual"`` or ``"auto"`` (``None``: botocore decides).
        aws_access_key_id: explicit credentials; ``None``: the standard AWS chain
            (environment, config files, SSO, container and instance roles).
        aws_secret_access_key: the secret matching ``aws_access_key_id``.
        aws_session_token: a session token for temporary credentials.
        connect_timeout: seconds to wait for a connection.
        read_timeout: seconds to wait for each read from a connection (not the whole body).

    Raises:
        ConfigurationError: an option has the wrong type or value.

    Example:
        >>> S3Backend("my-bucket", max_connections=8, region="eu-west-1").url
        's3://my-bucket'
    """

    capabilities = Capabilities(
        min_part_size=5 * MiB,
        max_part_size=5 * GiB,
        max_parts=10_000,
        parallel_parts=True,
        conditional_writes=True,
        # Only CRC32C is kept whole for every object (FULL_OBJECT for multipart); S3's
        # multipart SHA-256 is composite and cannot verify a download.
        native_checksums=frozenset({"crc32c"}),
        signed_urls=True,
    )
    # CopyObject's limit; larger objects are copied part by part (tests lower these).
    multipart_copy_threshold = 5 * GiB
    copy_part_size = 512 * MiB

    def __init__(
        self,
        bucket: str,
        *,
        max_connections: int,
        endpoint_url: str | None = None,
        region: str | None = None,
        profile: str | None = None,
        addressing_style: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
    ) -> None:
        if not isinstance(bucket, str) or not bucket or "/" in bucket:
            raise ConfigurationError(f"invalid S3 bucket name {bucket!r}")
        if isinstance(max_connections, bool) or not isinstance(max_connections, int):
            raise ConfigurationError("max_connections must be an int")
        if max_connections < 1:
            raise ConfigurationError(f"max_connections must be >= 1, not {max_connections}")
        self.bucket = bucket
        self.max_connections = max_connections
        self.endpoint_url = check_str("endpoint_url", endpoint_url)
        if self.endpoint_url is not None:
            scheme, sep, rest = self.endpoint_url.partition("://")
            if not sep or scheme.lower() not in ("http", "https") or not rest:
                raise ConfigurationError("S3 option endpoint_url must be an http(s):// URL")
            if "@" in rest.split("/", 1)[0]:
                raise ConfigurationError("S3 endpoint_url may not carry credentials")
        self.region = check_str("region", region)
        self.profile = check_str("profile", profile)
        self.addressing_style = check_str(
            "addressing_style", addressing_style, choices=("auto", "path", "virtual")
        )
        # Held privately and never echoed: neither the values nor their lengths appear in
        # any message or repr.
        self._key_id = check_str("aws_access_key_id", aws_access_key_id)
        self._secret = check_str("aws_secret_access_key", aws_secret_access_key)
        self._token = check_str("aws_session_token", aws_session_token)
        if (self._key_id is None) != (self._secret is None):
            raise ConfigurationError(
                "give both aws_access_key_id and aws_secret_access_key, or neither"
            )
        if self._token is not None and self._key_id is None:
            raise ConfigurationError("aws_session_token needs aws_access_key_id too")
        self.connect_timeout = check_float("connect_timeout", connect_timeout)
        self.read_timeout = check_float("read_timeout", read_timeout)
        self._client: Any = None
        self._client_cm: Any = None
        # Checksum algorithm each open multipart upload was created with: S3 rejects part
        # checksums of another algorithm. Entries leave at completion or abort.
        self._upload_algorithms: dict[str, str | None] = {}

    def __repr__(self) -> str:
        return (
            f"S3Backend(bucket={self.bucket!r}, endpoint_url={self.endpoint_url!r}, "
            f"region={self.region!r}, explicit_credentials={self._key_id is not None})"
        )

    @property
    def url(self) -> str:
        """``s3://BUCKET``."""
        return f"s3://{self.bucket}"

    # -- lifecycle -----------------------------------------------------------------------

    async def open(self) -> None:
        """Create the aiobotocore session and client on the running loop."""
        if self._client is not None:
            return
        install_signature_filter()
        try:
            # Reading ~/.aws/config and botocore's models is blocking file I/O: off the loop.
            session = await anyio.to_thread.run_sync(new_session, self.profile)
        except bx.ProfileNotFound as exc:
            raise ConfigurationError(f"AWS profile {self.profile!r} not found") from exc
        kwargs: dict[str, Any] = {
            "config": client_config(
                max_connections=self.max_connections,
                connect_timeout=self.connect_timeout,
                read_timeout=self.read_timeout,
                addressing_style=self.addressing_style,
            )
        }
        if self.endpoint_url is not None:
            kwargs["endpoint_url"] = self.endpoint_url
        if self.region is not None:
            kwargs["region_name"] = self.region
        if self._key_id is not None:
            kwargs["aws_access_key_id"] = self._key_id
            kwargs["aws_secret_access_key"] = self._secret
            kwargs["aws_session_token"] = self._token
        cm = session.create_client("s3", **kwargs)
        with self._errors(None, "open"):
            self._client = await cm.__aenter__()
        self._client_cm = cm
        # botocore sends "Expect: 100-continue" with bodies and waits for the interim reply
        # with no timeout, so a silent server would hang a put forever; send bodies at once.
        self._client.meta.events.unregister("before-call.s3", botocore.handlers.add_expect_header)

    async def close(self) -> None:
        """Close the client and its connection pool (a no-op when never opened)."""
        cm, self._client_cm, self._client = self._client_cm, None, None
        if cm is not None:
            with contextlib.suppress(Exception):
                await cm.__aexit__(None, None, None)

    @property
    def _c(self) -> Any:
        if self._client is None:
            raise ClosedError(f"{self.url} backend is not open")
        return self._client

    def _errors(
        self,
        key: str | None,
        operation: str,
        *,
        conditional_create: bool = False,
        upload_id: str | None = None,
    ) -> contextlib.AbstractContextManager[None]:
        return s3_errors(
            key=key,
            store=self.url,
            operation=operation,
            bucket=self.bucket,
            conditional_create=conditional_create,
            upload_id=upload_id,
        )

    # -- objects -------------------------------------------------------------------------

    def _info(self, key: str, response: Mapping[str, Any]) -> ObjectInfo:
        version = response.get("VersionId")
        return ObjectInfo(
            key=key,
            size=int(response.get("ContentLength", 0)),
            etag=strip_etag(response.get("ETag")),
            last_modified=utc(response.get("LastModified")),
            checksums=recorded_checksums(response),
            version=version if version and version != "null" else None,
            content_type=response.get("ContentType"),
        )

    async def _head(self, key: str, operation: str, etag: str | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "ChecksumMode": "ENABLED"}
        if etag is not None:
            params["IfMatch"] = quote_etag(etag)
        with self._errors(key, operation):
            response: dict[str, Any] = await self._c.head_object(**params)
        return response

    async def head(self, key: str) -> ObjectInfo:
        """HeadObject: size, ETag, time, version, content type and whole-object checksums."""
        return self._info(key, await self._head(key, "head"))

    async def read_object(
        self, key: str, *, chunk_size: int
    ) -> tuple[ObjectInfo, AsyncIterator[bytes]]:
        """One GetObject: its response headers carry what HeadObject would."""
        with self._errors(key, "get"):
            response = await self._c.get_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
        return self._info(key, response), self._stream(response["Body"], key, chunk_size)

    async def _stream(self, body: Any, key: str, chunk_size: int) -> AsyncIterator[bytes]:
        try:
            while True:
                with self._errors(key, "get"):
                    chunk = await body.read(chunk_size)
                if not chunk:
                    break
                yield chunk
        finally:
            # Closing (not draining) drops the connection when the reader stops early.
            body.close()

    async def get_range(
        self, key: str, start: int, end: int | None, *, etag: str | None, chunk_size: int
    ) -> AsyncIterator[bytes]:
        """GetObject of ``[start, end)``, streamed; pinned with If-Match when ``etag`` is given."""
        if start < 0 or (end is not None and end < start):
            raise InvalidRangeError(
                f"invalid range {start}-{end}", key=key, store=self.url, operation="get"
            )
        if end == start:
            # HTTP cannot express an empty range ("bytes=5-4" is invalid): check that the
            # object (and version) exist and the range lies inside it, and send no bytes.
            size = int((await self._head(key, "get", etag)).get("ContentLength", 0))
            if start > size:
                raise self._bad_range(key, start, end, size)
            return
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if etag is not None:
            params["IfMatch"] = quote_etag(etag)
        if start > 0 or end is not None:
            params["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        with self._errors(key, "get"):
            try:
                response = await self._c.get_object(**params)
            except bx.ClientError as exc:
                actual = (exc.response or {}).get("Error", {}).get("ActualObjectSize")
                if end is None and error_code(exc)[0] == "InvalidRange" and actual == str(start):
                    return  # reading on from the very end: nothing is left, as for a file
                raise
        body = response["Body"]
        total = _total_size(response.get("ContentRange"))
        if end is not None and total is not None and end > total:
            body.close()
            # S3 clips a range that runs past the end; astore treats it as an error.
            raise self._bad_range(key, start, end, total)
        async for chunk in self._stream(body, key, chunk_size):
            yield chunk

    def _bad_range(self, key: str, start: int, end: int | None, size: int) -> InvalidRangeError:
        return InvalidRangeError(
            f"range {start}-{end} outside {size} bytes", key=key, store=self.url, operation="get"
        )

    async def put_object(
        self,
        key: str,
        data: Buffer,
        *,
        if_not_exists: bool,
        checksums: Mapping[str, str],
        content_type: str | None,
    ) -> ObjectInfo:
        """PutObject, S3 verifying the checksums and recording them natively and as metadata."""
        body, size = body_of(data), memoryview(data).nbytes
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": key,
            "Body": body,
            "ContentLength": size,
            "Metadata": {f"{META_PREFIX}{a}": v for a, v in checksums.items()},
            **checksum_params(checksums),
        }
        if content_type is not None:
            params["ContentType"] = content_type
        if if_not_exists:
            params["IfNoneMatch"] = "*"
        with self._errors(key, "put", conditional_create=if_not_exists):
            try:
                response = await self._c.put_object(**params)
            finally:
                body.release()
        version = response.get("VersionId")
        return ObjectInfo(
            key=key,
            size=size,
            etag=strip_etag(response.get("ETag")),
            checksums=dict(checksums),
            version=version if version and version != "null" else None,
            content_type=content_type,
        )

    async def list_pages(
        self, prefix: str, *, delimiter: str | None, start_after: str | None, page_size: int
    ) -> AsyncIterator[ListPage]:
        """ListObjectsV2, one service page per yielded page."""
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": prefix,
            "MaxKeys": max(1, min(page_size, 1000)),
        }
        if delimiter:
            params["Delimiter"] = delimiter
        if start_after is not None:
            params["StartAfter"] = start_after
        while True:
            with self._errors(prefix or None, "list"):
                response = await self._c.list_objects_v2(**params)
            objects = [
                ObjectInfo(
                    key=item["Key"],
                    size=int(item.get("Size", 0)),
                    etag=strip_etag(item.get("ETag")),
                    last_modified=utc(item.get("LastModified")),
                )
                for item in response.get("Contents", ())
            ]
            prefixes = [p["Prefix"] for p in response.get("CommonPrefixes", ())]
            if objects or prefixes:
                yield ListPage(objects=objects, prefixes=prefixes)
            token = response.get("NextContinuationToken")
            if not response.get("IsTruncated") or not token:
                return
            params["ContinuationToken"] = token
            params.pop("StartAfter", None)

    async def delete_many(self, keys: Sequence[str]) -> dict[str, ObjectError]:
        """DeleteObjects in quiet mode, in batches of 1,000; per-key failures are returned."""
        failed: dict[str, ObjectError] = {}
        for first in range(0, len(keys), _DELETE_BATCH):
            batch = keys[first : first + _DELETE_BATCH]
            request = {"Objects": [{"Key": k} for k in batch], "Quiet": True}
            with self._errors(batch[0] if len(batch) == 1 else None, "delete"):
                response = await self._c.delete_objects(Bucket=self.bucket, Delete=request)
            for item in response.get("Errors", ()):
                key = item.get("Key", "")
                if item.get("Code") == "NoSuchKey":
                    continue  # already gone: deleting it succeeded
                fake = bx.ClientError({"Error": dict(item)}, "DeleteObjects")
                failed[key] = client_error(
                    fake, key=key, store=self.url, operation="delete", bucket=self.bucket
                )
        return failed

    async def copy(self, src: str, dst: str, *, if_not_exists: bool) -> ObjectInfo:
        """CopyObject (UploadPartCopy beyond 5 GiB), keeping metadata and checksums."""
        head = await self._head(src, "copy")
        source = self._info(src, head)
        if if_not_exists:
            # Services that ignore If-None-Match on copies still refuse a visible target.
            with contextlib.suppress(NotFoundError):
                await self._head(dst, "copy")
                raise AlreadyExistsError(
                    "the object already exists", key=dst, store=self.url, operation="copy"
                )
        if source.size > self.multipart_copy_threshold:
            info: ObjectInfo = await multipart_copy(
                self, self._c, head, src, dst, if_not_exists=if_not_exists
            )
            return info
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": dst,
            "CopySource": {"Bucket": self.bucket, "Key": src},
            "MetadataDirective": "COPY",
        }
        if source.etag is not None:
            params["CopySourceIfMatch"] = quote_etag(source.etag)
        if "crc32c" in source.checksums:
            # S3 computes a fresh full-object CRC32C of the copy, whatever the source had.
            params["ChecksumAlgorithm"] = "CRC32C"
        if if_not_exists:
            params["IfNoneMatch"] = "*"
        with self._errors(dst, "copy", conditional_create=if_not_exists):
            response = await self._c.copy_object(**params)
        result = response.get("CopyObjectResult", {})
        version = response.get("VersionId")
        return ObjectInfo(
            key=dst,
            size=source.size,
            etag=strip_etag(result.get("ETag")),
            last_modified=utc(result.get("LastModified")),
            checksums=dict(source.checksums),
            version=version if version and version != "null" else None,
            content_type=source.content_type,
        )

    # -- optional ------------------------------------------------------------------------

    async def signed_url(self, key: str, *, method: str, expires: float) -> str:
        """A presigned GET or PUT URL, valid for ``expires`` seconds (at most 7 days)."""
        operation = _PRESIGN_METHODS.get(method.upper())
        if operation is None:
            raise ObjectError(
                f"cannot sign {method!r}: only GET and PUT",
                key=key,
                store=self.url,
                operation="signed_url",
            )
        seconds = math.ceil(expires)
        if not 1 <= seconds <= _MAX_EXPIRES:
            raise ObjectError(
                f"expires must be 1 s to 7 days, not {expires}",
                key=key,
                store=self.url,
                operation="signed_url",
            )
        with self._errors(key, "signed_url"):
            url: str = await self._c.generate_presigned_url(
                operation, Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=seconds
            )
        return url


def _total_size(content_range: object) -> int | None:
    """The object size from a ``Content-Range: bytes a-b/total`` header."""
    if not isinstance(content_range, str) or "/" not in content_range:
        return None
    total = content_range.rsplit("/", 1)[1]
    return int(total) if total.isdigit() else None
