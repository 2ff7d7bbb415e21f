"""The GCS backend's connection layer: configuration, session lifecycle, requests, and the
translation of object resources into :class:`~astore.ObjectInfo`.

The session is one aiohttp ``ClientSession`` shared by gcloud-aio-storage (auth, metadata,
listing, deletes, rewrites) and the backend's own requests (uploads, ranged reads), all with a
per-read timeout instead of the library's whole-transfer default.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

import aiohttp
import anyio
import anyio.to_thread
from gcloud.aio.storage import Storage

from .._exceptions import ClosedError, ConfigurationError, IntegrityError, ObjectError
from .._types import ObjectInfo
from ._gcs_errors import error_boundary, raise_for_status

if TYPE_CHECKING:
    from ._gcs_resumable import ResumableSession

__all__ = ["DEFAULT_TIMEOUT", "GCSClient", "META_PREFIX", "NATIVE", "PRODUCTION_ROOT"]

DEFAULT_TIMEOUT = 60.0
PRODUCTION_ROOT = "https://storage.googleapis.com"
# Checksums GCS records and verifies itself (astore name -> resource field); others are kept
# as custom metadata under META_PREFIX.
NATIVE = {"crc32c": "crc32c", "md5": "md5Hash"}
META_PREFIX = "astore-"


class _Request(aiohttp.ClientRequest):
    """A request whose body writer never ends with an exception nobody retrieves.

    aiohttp runs the body writer as its own task. When the server answers before the body
    is sent and then drops the connection (a 503, a reset), the final ``write_eof`` fails
    after the response has been read and released: the task's exception is never awaited
    and asyncio logs "Task exception was never retrieved". The connection is already closed
    by then and the response side reports any failure that matters, so the writer's own
    connection error carries nothing new.
    """

    async def write_bytes(self, *args: Any, **kwargs: Any) -> None:
        with contextlib.suppress(aiohttp.ClientConnectionError, ConnectionError):
            await super().write_bytes(*args, **kwargs)


class GCSClient:
    """Configuration and plumbing shared by the GCS backend's operations (see GCSBackend)."""

    def __init__(
        self,
        bucket: str,
        *,
        max_connections: int,
        service_file: str | os.PathLike[str] | None = None,
        project: str | None = None,
        emulator_host: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        service_account_email: str | None = None,
    ) -> None:
        if not bucket or "/" in bucket:
            raise ConfigurationError(f"invalid GCS bucket name {bucket!r}")
        if not isinstance(max_connections, int) or max_connections < 1:
            raise ConfigurationError(f"max_connections must be >= 1, not {max_connections!r}")
        if not isinstance(timeout, int | float) or timeout <= 0:
            raise ConfigurationError(f"timeout must be a positive number, not {timeout!r}")
        if emulator_host is None:
            emulator_host = os.environ.get("STORAGE_EMULATOR_HOST") or None
        if emulator_host and "://" not in emulator_host:
            emulator_host = f"http://{emulator_host}"
        self._bucket = bucket
        self._max_connections = max_connections
        self._service_file = os.fspath(service_file) if service_file is not None else None
        self.project = project
        self._emulator = emulator_host.rstrip("/") if emulator_host else None
        self._root = self._emulator or PRODUCTION_ROOT
        self._service_account_email = service_account_email
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=None, sock_connect=timeout, sock_read=timeout
        )
        self._session: aiohttp.ClientSession | None = None
        self._storage: Storage | None = None
        self._uploads: dict[str, ResumableSession] = {}

    def __repr__(self) -> str:
        where = f", emulator={self._emulator!r}" if self._emulator else ""
        return f"GCSBackend({self.url!r}{where})"

    @property
    def url(self) -> str:
        """``gs://BUCKET``."""
        return f"gs://{self._bucket}"

    # -- lifecycle -----------------------------------------------------------------------

    async def open(self) -> None:
        """Create the aiohttp session and the gcloud-aio ``Storage`` on the running loop."""
        if self._session is not None:
            return
        # Token refreshes share the pool, so leave them a few connections of their own.
        connector = aiohttp.TCPConnector(limit=self._max_connections + 4)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=self._timeout, request_class=_Request
        )
        make = functools.partial(
            Storage,
            service_file=self._service_file,
            # Typed for gcloud-rest's requests.Session; at run time it is aiohttp's.
            session=cast(Any, self._session),
            api_root=self._root,
            api_is_dev=self._emulator is not None,
        )
        try:
            # Reading the credentials file is blocking I/O: keep it off the loop.
            self._storage = await anyio.to_thread.run_sync(make)
        except (OSError, ValueError, KeyError) as exc:
            await self.close()
            raise ConfigurationError(
                f"cannot load GCS credentials ({type(exc).__name__}): {exc}"
            ) from exc

    async def close(self) -> None:
        """Close the session (a no-op if never opened)."""
        storage, session = self._storage, self._session
        self._storage = self._session = None
        if storage is not None:
            await storage.close()
        if session is not None:
            await session.close()

    # -- plumbing ------------------------------------------------------------------------

    def _client(self) -> tuple[aiohttp.ClientSession, Storage]:
        if self._session is None or self._storage is None:
            raise ClosedError(f"{self.url} backend is not open")
        return self._session, self._storage

    def _boundary(
        self, operation: str, key: str | None, **kw: bool
    ) -> contextlib.AbstractContextManager[None]:
        return error_boundary(self.url, operation, key, **kw)

    def _object_url(self, key: str) -> str:
        return f"{self._root}/storage/v1/b/{self._bucket}/o/{quote(key, safe='')}"

    async def _auth(self) -> dict[str, str]:
        _, storage = self._client()
        if self._emulator is not None:
            return {}
        token = await storage.token.get()
        return {"Authorization": f"Bearer {token}"}

    async def _send(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        data: Any = None,
        auto_decompress: bool = True,
    ) -> aiohttp.ClientResponse:
        """One request on the shared session; raises ``ClientResponseError`` for >= 400."""
        session, _ = self._client()
        response = await session.request(
            method,
            url,
            params=params,
            headers={**(await self._auth()), **(headers or {})},
            data=data,
            timeout=self._timeout,
            allow_redirects=False,
            auto_decompress=auto_decompress,
        )
        await raise_for_status(response)
        return response

    @property
    def _lib_timeout(self) -> Any:
        # gcloud-aio-storage annotates ``timeout`` as int seconds (a *total*), but passes the
        # value through to aiohttp, which takes our per-read ClientTimeout as is.
        return self._timeout

    def _info(self, resource: Mapping[str, Any]) -> ObjectInfo:
        checksums = {alg: resource[field] for alg, field in NATIVE.items() if resource.get(field)}
        for name, value in (resource.get("metadata") or {}).items():
            if name.startswith(META_PREFIX) and isinstance(value, str):
                checksums.setdefault(name[len(META_PREFIX) :], value)
        updated = resource.get("updated")
        generation = resource.get("generation")
        version = str(generation) if generation is not None else None
        return ObjectInfo(
            key=resource["name"],
            size=int(resource.get("size") or 0),
            etag=version,
            version=version,
            last_modified=datetime.fromisoformat(updated.replace("Z", "+00:00"))
            if updated
            else None,
            checksums=checksums,
            content_type=resource.get("contentType"),
        )

    async def _verify_stored(
        self, resource: Mapping[str, Any], checksums: Mapping[str, str], operation: str
    ) -> ObjectInfo:
        """Check the service's record against what we sent; undo the write on a mismatch.

        GCS verifies the checksums itself; this catches servers that do not (emulators) and
        a final request whose checksum header was not honoured.
        """
        info = self._info(resource)
        for alg in NATIVE:
            sent, stored = checksums.get(alg), info.checksums.get(alg)
            if sent is not None and stored is not None and sent != stored:
                params = {"ifGenerationMatch": info.version} if info.version else {}
                try:
                    with self._boundary(operation, info.key):
                        response = await self._send(
                            "DELETE", self._object_url(info.key), params=params
                        )
                        response.release()
                except ObjectError:
                    pass  # best effort: the IntegrityError below is what matters
                raise IntegrityError(
                    f"the service stored {alg} {stored} but the data sent has {sent}",
                    key=info.key,
                    store=self.url,
                    operation=operation,
                )
        return info
