"""The errors astore raises.

Every error is an :class:`AstoreError`. Errors about one object subclass the Python
built-in they mean, so ``except FileNotFoundError`` works as expected::

    AstoreError
    ├── ConfigurationError (ValueError)        bad URL or option, missing extra or credentials
    ├── ClosedError (RuntimeError)             the store was used outside its context
    ├── UnsupportedOperationError (NotImplementedError)
    ├── ObjectError  .key .store .operation
    │   ├── NotFoundError (FileNotFoundError)
    │   ├── AlreadyExistsError (FileExistsError)     also a lost conditional create
    │   ├── PermissionDeniedError (PermissionError)
    │   ├── PreconditionFailedError                  the object changed (ETag/generation)
    │   ├── InvalidKeyError (ValueError)
    │   ├── InvalidRangeError (ValueError)
    │   └── IntegrityError                           checksum mismatch
    ├── TransientError                         retryable
    │   ├── NetworkError (ConnectionError)
    │   ├── RequestTimeoutError (TimeoutError)
    │   ├── ThrottledError  .retry_after
    │   └── ServerError                        5xx from the service
    └── UploadError  .upload_id .parts_done .aborted

Backends translate their SDK's errors into this tree at one boundary and always chain
the original (``raise ... from exc``). No message contains a secret.
"""

from __future__ import annotations

__all__ = [
    "AlreadyExistsError",
    "AstoreError",
    "ClosedError",
    "ConfigurationError",
    "IntegrityError",
    "InvalidKeyError",
    "InvalidRangeError",
    "NetworkError",
    "NotFoundError",
    "ObjectError",
    "PermissionDeniedError",
    "PreconditionFailedError",
    "RequestTimeoutError",
    "ServerError",
    "ThrottledError",
    "TransientError",
    "UnsupportedOperationError",
    "UploadError",
]


class AstoreError(Exception):
    """Base class of every error raised by astore."""


class ConfigurationError(AstoreError, ValueError):
    """A URL, option or credential is invalid or missing."""


class ClosedError(AstoreError, RuntimeError):
    """The store is closed, or was never opened with ``async with``."""


class UnsupportedOperationError(AstoreError, NotImplementedError):
    """The store's service does not offer this operation (e.g. signed URLs on a local store)."""


class ObjectError(AstoreError):
    """An operation on one object failed.

    Attributes:
        key: the object's key, relative to the store (may be ``None`` for store-wide calls).
        store: the store's URL, without credentials.
        operation: the astore operation that failed (``"get"``, ``"upload"``, ...).
    """

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        store: str | None = None,
        operation: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.key = key
        self.store = store
        self.operation = operation

    def __str__(self) -> str:
        where = ""
        if self.store is not None or self.key is not None:
            base = (self.store or "").rstrip("/")
            where = f"{base}/{self.key}" if self.key is not None else base
        prefix = " ".join(p for p in (self.operation, where) if p)
        return f"{prefix}: {self.message}" if prefix else self.message

    def __reduce__(self) -> tuple[object, ...]:
        return (
            _rebuild_object_error,
            (type(self), self.message, self.key, self.store, self.operation, self.__dict__),
        )


def _rebuild_object_error(
    cls: type[ObjectError],
    message: str,
    key: str | None,
    store: str | None,
    operation: str | None,
    state: dict[str, object],
) -> ObjectError:
    err = cls.__new__(cls)
    ObjectError.__init__(err, message, key=key, store=store, operation=operation)
    err.__dict__.update(state)
    return err


class NotFoundError(ObjectError, FileNotFoundError):
    """The object (or bucket) does not exist."""


class AlreadyExistsError(ObjectError, FileExistsError):
    """The object exists and the call asked to create it only if it did not."""


class PermissionDeniedError(ObjectError, PermissionError):
    """The credentials are wrong or lack permission for this operation."""


class PreconditionFailedError(ObjectError):
    """The object changed since it was read (ETag or generation no longer matches)."""


class InvalidKeyError(ObjectError, ValueError):
    """The key is not a valid object key (empty, ``..``, NUL, backslash, absolute, ...)."""


class InvalidRangeError(ObjectError, ValueError):
    """The byte range is malformed or lies outside the object."""


class IntegrityError(ObjectError):
    """The bytes read do not match the checksum recorded for the object."""


class TransientError(ObjectError):
    """A failure that may succeed if retried; the retry policy retries these."""


class NetworkError(TransientError, ConnectionError):
    """The connection failed or was reset."""


class RequestTimeoutError(TransientError, TimeoutError):
    """A request, or the whole operation's deadline, timed out."""


class ServerError(TransientError):
    """The service answered with a 5xx error."""


class ThrottledError(TransientError):
    """The service asked the client to slow down.

    Attributes:
        retry_after: seconds the service asked to wait, if it said.
    """

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        key: str | None = None,
        store: str | None = None,
        operation: str | None = None,
    ) -> None:
        super().__init__(message, key=key, store=store, operation=operation)
        self.retry_after = retry_after


class UploadError(ObjectError):
    """A multipart upload failed.

    Attributes:
        upload_id: the service's id of the multipart upload.
        parts_done: how many parts had been stored before the failure.
        aborted: whether the upload was aborted (no parts left behind).
    """

    def __init__(
        self,
        message: str,
        *,
        upload_id: str | None = None,
        parts_done: int = 0,
        aborted: bool = False,
        key: str | None = None,
        store: str | None = None,
        operation: str | None = None,
    ) -> None:
        super().__init__(message, key=key, store=store, operation=operation)
        self.upload_id = upload_id
        self.parts_done = parts_done
        self.aborted = aborted
