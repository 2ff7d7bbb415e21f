"""astore: async-native object storage for Python.

Open a store by URL and use it with ``async with``::

    async with astore.open("s3://bucket/prefix") as store:
        await store.upload("ckpt.pt", "runs/7/ckpt.pt")

See :func:`open`, :class:`AsyncStore`, :class:`TransferConfig` and :class:`RetryPolicy`.
"""

from ._config import GiB, KiB, MiB, TransferConfig
from ._exceptions import (
    AlreadyExistsError,
    AstoreError,
    ClosedError,
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
    TransientError,
    UnsupportedOperationError,
    UploadError,
)
from ._progress import ProgressCallback
from ._retry import RetryPolicy
from ._store import AsyncStore, UploadHandle, open
from ._sync import Store, open_sync
from ._types import Capabilities, ObjectInfo

__version__ = "0.1.0"

__all__ = [
    "AlreadyExistsError",
    "AstoreError",
    "AsyncStore",
    "Capabilities",
    "ClosedError",
    "ConfigurationError",
    "GiB",
    "IntegrityError",
    "InvalidKeyError",
    "InvalidRangeError",
    "KiB",
    "MiB",
    "NetworkError",
    "NotFoundError",
    "ObjectError",
    "ObjectInfo",
    "PermissionDeniedError",
    "PreconditionFailedError",
    "ProgressCallback",
    "RequestTimeoutError",
    "RetryPolicy",
    "ServerError",
    "Store",
    "ThrottledError",
    "TransferConfig",
    "TransientError",
    "UnsupportedOperationError",
    "UploadError",
    "UploadHandle",
    "open",
    "open_sync",
]
