"""The S3 backend's one error boundary: botocore and aiohttp failures → the astore tree.

Every S3 call (and every read of a response body) runs inside :func:`s3_errors`, which turns
service error codes, HTTP statuses and connection failures into astore errors chained to the
original. Messages carry the service's error code and message, never a credential or URL.
"""

from __future__ import annotations

import contextlib
import email.utils
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
from botocore import exceptions as bx

from .._exceptions import (
    AlreadyExistsError,
    AstoreError,
    ConfigurationError,
    IntegrityError,
    InvalidKeyError,
    InvalidRangeError,
    NetworkError,
    NotFoundError,
    ObjectError,
    PermissionDeniedError,
    PreconditionFailedError,
    RequestTimeoutError,
    ServerError,
    ThrottledError,
    UploadError,
)

__all__ = ["client_error", "error_code", "s3_errors"]

_NOT_FOUND = frozenset({"NoSuchKey", "NotFound", "404", "NoSuchVersion"})
_DENIED = frozenset(
    {
        "AccessDenied",
        "Forbidden",
        "403",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "AllAccessDisabled",
        "AccountProblem",
    }
)
_INTEGRITY = frozenset({"BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch"})
_THROTTLED = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests"}
)
_TIMEOUT = frozenset({"RequestTimeout", "RequestTimeoutException"})
# Multipart completions the caller got wrong: the upload itself is fine, the part list is not.
_BAD_PARTS = frozenset({"EntityTooSmall", "InvalidPart", "InvalidPartOrder", "MalformedXML"})
_BAD_KEY = frozenset({"KeyTooLongError", "InvalidURI", "InvalidObjectName"})


def error_code(exc: bx.ClientError) -> tuple[str, int]:
    """The service's error code and HTTP status of ``exc`` (``("", 0)`` when absent)."""
    response: dict[str, Any] = exc.response or {}
    code = str(response.get("Error", {}).get("Code", "") or "")
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return code, status


def _retry_after(exc: bx.ClientError) -> float | None:
    headers = (exc.response or {}).get("ResponseMetadata", {}).get("HTTPHeaders", {}) or {}
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def client_error(
    exc: bx.ClientError,
    *,
    key: str | None,
    store: str,
    operation: str,
    bucket: str,
    conditional_create: bool = False,
    upload_id: str | None = None,
) -> ObjectError:
    """The astore error for one service error response (not raised: the caller chains it)."""
    code, status = error_code(exc)
    message = str((exc.response or {}).get("Error", {}).get("Message", "") or "").strip()
    detail = f"{code or status}: {message}" if message else (code or f"HTTP {status}")
    where: dict[str, Any] = {"key": key, "store": store, "operation": operation}
    if code == "NoSuchBucket":
        return NotFoundError(f"bucket {bucket!r} does not exist ({detail})", **where)
    if code == "NoSuchUpload":
        return NotFoundError(f"no multipart upload {upload_id!r} ({detail})", **where)
    if code in _NOT_FOUND or status == 404:
        return NotFoundError(f"no such object ({detail})", **where)
    if code in _DENIED or status in (401, 403):
        return PermissionDeniedError(f"access denied ({detail})", **where)
    if code == "PreconditionFailed" or status == 412:
        if conditional_create:
            return AlreadyExistsError(f"the object already exists ({detail})", **where)
        return PreconditionFailedError(f"the object changed ({detail})", **where)
    if code == "ConditionalRequestConflict" or status == 409:
        # S3 answers 409 when another conditional write to the key raced ours: for a
        # create-if-absent the other writer won (or may win); otherwise retrying is safe.
        if conditional_create:
            return AlreadyExistsError(f"a concurrent write won the race ({detail})", **where)
        return ServerError(f"conflicting concurrent request ({detail})", **where)
    if code == "InvalidRange" or status == 416:
        return InvalidRangeError(f"range not satisfiable ({detail})", **where)
    if code in _INTEGRITY or "checksum" in code.lower():
        return IntegrityError(f"the service rejected a checksum ({detail})", **where)
    if code in _BAD_PARTS:
        return UploadError(
            f"the service rejected the part list ({detail})", upload_id=upload_id, **where
        )
    if code in _BAD_KEY:
        return InvalidKeyError(f"the service rejected the key ({detail})", **where)
    if code in _THROTTLED or status in (429, 503):
        return ThrottledError(f"throttled ({detail})", retry_after=_retry_after(exc), **where)
    if code in _TIMEOUT or status == 408:
        return RequestTimeoutError(f"the service timed out the request ({detail})", **where)
    if status >= 500 or code in ("InternalError", "ServiceUnavailable"):
        return ServerError(f"server error ({detail})", **where)
    return ObjectError(f"S3 error ({detail})", **where)


@contextlib.contextmanager
def s3_errors(
    *,
    key: str | None,
    store: str,
    operation: str,
    bucket: str,
    conditional_create: bool = False,
    upload_id: str | None = None,
) -> Iterator[None]:
    """Translate any botocore/aiohttp failure inside the block; astore errors pass through."""
    where: dict[str, Any] = {"key": key, "store": store, "operation": operation}
    try:
        yield
    except AstoreError:
        raise
    except bx.ClientError as exc:
        raise client_error(
            exc,
            key=key,
            store=store,
            operation=operation,
            bucket=bucket,
            conditional_create=conditional_create,
            upload_id=upload_id,
        ) from exc
    except bx.FlexibleChecksumError as exc:
        raise IntegrityError(f"response checksum mismatch: {exc}", **where) from exc
    except (bx.ConnectTimeoutError, bx.ReadTimeoutError) as exc:
        raise RequestTimeoutError(f"timed out: {type(exc).__name__}", **where) from exc
    except (bx.NoCredentialsError, bx.PartialCredentialsError) as exc:
        raise ConfigurationError(f"no usable AWS credentials for {store}: {exc}") from exc
    except bx.ParamValidationError as exc:
        # Cut short: botocore quotes the offending value, which may be a whole body.
        raise ObjectError(f"invalid request: {str(exc)[:200]}", **where) from exc
    except (
        bx.EndpointConnectionError,
        bx.ConnectionClosedError,
        bx.ResponseStreamingError,
        bx.IncompleteReadError,
        bx.HTTPClientError,
        aiohttp.ClientError,
        ConnectionError,
    ) as exc:
        raise NetworkError(f"connection failed: {type(exc).__name__}", **where) from exc
    except TimeoutError as exc:
        raise RequestTimeoutError("timed out", **where) from exc
    except OSError as exc:
        raise NetworkError(f"I/O error: {type(exc).__name__}", **where) from exc
