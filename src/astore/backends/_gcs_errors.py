"""The GCS backend's one error boundary: aiohttp and HTTP failures → the astore error tree.

Both gcloud-aio-storage and the backend's own requests report HTTP errors as
:class:`aiohttp.ClientResponseError`, so one translation covers every call. Messages carry the
HTTP status and the service's (truncated) explanation, never a URL: a resumable session URI
or a signed URL in a message would hand out write or read access.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy

from .._exceptions import (
    AlreadyExistsError,
    AstoreError,
    IntegrityError,
    InvalidRangeError,
    NetworkError,
    NotFoundError,
    ObjectError,
    PermissionDeniedError,
    PreconditionFailedError,
    RequestTimeoutError,
    ServerError,
    ThrottledError,
)

__all__ = ["RedactedError", "error_boundary", "raise_for_status", "translate"]

_MAX_MESSAGE = 300
_CHECKSUM_MESSAGE = re.compile(r"crc32c|md5|checksum|hash", re.IGNORECASE)


async def raise_for_status(response: aiohttp.ClientResponse) -> None:
    """Raise :class:`aiohttp.ClientResponseError` for a 4xx/5xx response, with the service's
    explanation and without the request URL.

    The connection is closed rather than returned to the pool: some servers (fake-gcs-server
    after a 416) drop the connection after an error, and a reused dead connection would fail
    the next, unrelated request.
    """
    if response.status < 400:
        return
    try:
        body = await response.text(errors="replace")
    except (TimeoutError, aiohttp.ClientError):
        body = ""
    finally:
        response.close()
    raise aiohttp.ClientResponseError(
        _safe_request_info(response.request_info),
        (),
        status=response.status,
        message=f"{response.reason}: {_explain(body)}",
        headers=response.headers,
    )


def _safe_request_info(info: aiohttp.RequestInfo) -> aiohttp.RequestInfo:
    """``info`` without its headers (the bearer token) or query (a resumable session id):
    ``ClientResponseError``'s repr shows both."""
    safe_url = info.real_url.with_query(None)
    return aiohttp.RequestInfo(safe_url, info.method, CIMultiDictProxy(CIMultiDict()), safe_url)


def _sanitized(exc: aiohttp.ClientResponseError) -> aiohttp.ClientResponseError:
    """A copy of ``exc`` that is safe to chain (gcloud-aio-storage raises with full details)."""
    clean = aiohttp.ClientResponseError(
        _safe_request_info(exc.request_info),
        (),
        status=exc.status,
        message=exc.message,
        headers=exc.headers,
    )
    clean.__traceback__ = exc.__traceback__
    return clean


class RedactedError(Exception):
    """Stands in as the cause of an error whose original text held a secret (a session URI)."""


def _explain(body: str) -> str:
    """The service's error message from a JSON error body, else the body itself (short)."""
    text = body.strip()
    try:
        doc = json.loads(text)
    except ValueError:
        pass
    else:
        if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
            message = doc["error"].get("message")
            if isinstance(message, str) and message:
                text = message
    return text[:_MAX_MESSAGE]


def _retry_after(headers: object) -> float | None:
    value = getattr(headers, "get", lambda _k: None)("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None


def translate(
    exc: BaseException,
    *,
    store: str,
    operation: str,
    key: str | None,
    conditional_create: bool = False,
) -> AstoreError | None:
    """The astore error for ``exc``, or ``None`` when it is not a service or network failure."""
    where = {"key": key, "store": store, "operation": operation}
    if isinstance(exc, aiohttp.ClientResponseError):
        status = exc.status
        detail = (exc.message or "").strip()
        message = f"HTTP {status}" + (f" ({detail[:_MAX_MESSAGE]})" if detail else "")
        if status == 404 or status == 410:
            return NotFoundError(f"no such object or bucket: {message}", **where)
        if status in (401, 403):
            return PermissionDeniedError(f"access denied: {message}", **where)
        if status == 412:
            if conditional_create:
                return AlreadyExistsError(f"the object already exists: {message}", **where)
            return PreconditionFailedError(f"the object changed: {message}", **where)
        if status == 416:
            return InvalidRangeError(f"range not satisfiable: {message}", **where)
        if status == 400 and _CHECKSUM_MESSAGE.search(detail):
            return IntegrityError(f"the service rejected a checksum: {message}", **where)
        if status == 408:
            return RequestTimeoutError(f"the service timed out: {message}", **where)
        if status == 429:
            return ThrottledError(
                f"throttled: {message}", retry_after=_retry_after(exc.headers), **where
            )
        if status >= 500:
            return ServerError(f"service error: {message}", **where)
        return ObjectError(f"request rejected: {message}", **where)
    # Timeouts first: aiohttp's ServerTimeoutError is also a ClientConnectionError.
    if isinstance(exc, TimeoutError):
        return RequestTimeoutError("the request timed out", **where)
    if isinstance(exc, aiohttp.ClientPayloadError):
        return NetworkError(f"the response body was cut short: {type(exc).__name__}", **where)
    if isinstance(exc, aiohttp.ClientConnectionError | ConnectionError):
        return NetworkError(f"connection failed: {type(exc).__name__}", **where)
    if isinstance(exc, aiohttp.ContentTypeError | json.JSONDecodeError):
        return ServerError("the service sent a malformed response", **where)
    if isinstance(exc, aiohttp.ClientError | OSError):
        return NetworkError(f"request failed: {type(exc).__name__}", **where)
    return None


@contextlib.contextmanager
def error_boundary(
    store: str,
    operation: str,
    key: str | None,
    *,
    conditional_create: bool = False,
    redact: bool = False,
) -> Iterator[None]:
    """Translate failures inside the block into astore errors (``raise ... from exc``).

    With ``redact``, the block talks to a resumable session URI, which aiohttp's connection
    errors quote in full: the original is then replaced by a :class:`RedactedError` naming
    only its type.
    """
    try:
        yield
    except AstoreError:
        raise
    except Exception as exc:
        mapped = translate(
            exc, store=store, operation=operation, key=key, conditional_create=conditional_create
        )
        if mapped is None:
            raise
        if isinstance(exc, aiohttp.ClientResponseError):
            raise mapped from _sanitized(exc)
        if redact:
            raise mapped from RedactedError(f"{type(exc).__name__} (details hold the session URI)")
        raise mapped from exc
