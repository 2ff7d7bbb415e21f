"""AsyncStore: the asyncio API, and the only place where transfer policy lives.

The class is assembled from its halves: plumbing and lifecycle in ``_base.py``, reads in
``_reads.py``, writes in ``_writes.py``; the transfer algorithms live in ``_transfer.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ._base import UploadHandle
from ._config import TransferConfig
from ._keys import check_prefix
from ._reads import ReadOps
from ._retry import DEFAULT_RETRY, RetryPolicy
from ._url import make_backend, parse_url
from ._writes import WriteOps

__all__ = ["AsyncStore", "UploadHandle", "open"]


def open(
    url: str | os.PathLike[str],
    *,
    transfer: TransferConfig | None = None,
    retry: RetryPolicy | None = None,
    **options: Any,
) -> AsyncStore:
    """Open a store by URL; use the result with ``async with``.

    Args:
        url: a folder path or ``file:///path`` (local store), ``memory://NAME[/PREFIX]``,
            ``s3://BUCKET[/PREFIX]`` or ``gs://BUCKET[/PREFIX]``. A store opened on a prefix
            sees keys relative to it.
        transfer: part sizes, concurrency and memory budget (:class:`TransferConfig`).
        retry: the retry policy for every request (:class:`RetryPolicy`).
        **options: backend options, e.g. ``endpoint_url=`` and ``region=`` for S3,
            ``fsync=False`` for a local store.

    Raises:
        ConfigurationError: the URL or an option is invalid, or the backend's extra is missing.

    Example:
        >>> async def main():
        ...     async with astore.open("memory://demo") as store:
        ...         await store.put("a.txt", b"hello")
        ...         return await store.get("a.txt")
    """
    transfer = transfer or TransferConfig()
    scheme, container, prefix = parse_url(url if isinstance(url, str | Path) else os.fspath(url))
    if prefix:
        prefix = check_prefix(prefix + "/").rstrip("/")
    backend = make_backend(scheme, container, options, max_connections=transfer.max_concurrency * 4)
    return AsyncStore(backend, prefix=prefix, transfer=transfer, retry=retry or DEFAULT_RETRY)


class AsyncStore(ReadOps, WriteOps):
    """An object store, used from asyncio: ``async with astore.open(url) as store``.

    Every call validates its arguments before any I/O, runs its requests under the store's
    retry policy and limits, and checksums what it writes (CRC32C by default, off the event
    loop) so that every read can be verified. Leaving the ``async with`` block waits for
    background uploads and closes the backend's connections.
    """
