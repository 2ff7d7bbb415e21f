"""The backend protocol: the primitive operations a storage service offers.

A backend is a thin adapter over one container (a bucket, a root folder, a named in-memory
store). It never retries, never spawns unbounded tasks and never hashes for policy reasons:
:class:`~astore.AsyncStore` plans every transfer, applies limits, retries and checksums, and
calls these primitives. Keys given to a backend are full keys within its container (the store
has already applied its prefix and validated them).

Every primitive raises only errors of the astore tree, translated at one boundary in the
backend and chained to the original (``raise ... from exc``).
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping, Sequence

from ._exceptions import ObjectError, UnsupportedOperationError
from ._types import Capabilities, ListPage, ObjectInfo, PartInfo, UploadInfo

__all__ = ["Backend", "Buffer"]

Buffer = bytes | bytearray | memoryview


class Backend(abc.ABC):
    """Primitive operations on one container of one storage service.

    Subclasses set :attr:`capabilities` and :attr:`url`, create their sessions in
    :meth:`open` (on the running loop, never in ``__init__``) and close them in :meth:`close`.
    """

    capabilities: Capabilities = Capabilities()

    @property
    @abc.abstractmethod
    def url(self) -> str:
        """The container's URL without credentials, e.g. ``s3://bucket`` (used in errors)."""

    async def open(self) -> None:  # noqa: B027 - optional hook
        """Create sessions and clients on the running loop."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release sessions and clients. Called once; must not raise for a never-opened backend."""

    # -- objects -------------------------------------------------------------------------

    @abc.abstractmethod
    async def head(self, key: str) -> ObjectInfo:
        """Metadata of ``key``, with the checksums recorded for it.

        Raises:
            NotFoundError: no such object.
        """

    @abc.abstractmethod
    def get_range(
        self,
        key: str,
        start: int,
        end: int | None,
        *,
        etag: str | None,
        chunk_size: int,
    ) -> AsyncIterator[bytes]:
        """Stream bytes ``[start, end)`` of ``key`` (``end=None``: to the end) in chunks.

        When ``etag`` is given, the read is pinned to that version of the object.

        Raises:
            NotFoundError: no such object.
            PreconditionFailedError: the object's ETag is no longer ``etag``.
        """

    async def read_object(
        self, key: str, *, chunk_size: int
    ) -> tuple[ObjectInfo, AsyncIterator[bytes]]:
        """The object's metadata and a stream of its whole body.

        The default makes two requests (:meth:`head`, then :meth:`get_range` pinned to the
        ETag); backends whose read response carries the metadata override it with one, which
        halves the requests of small reads.

        Raises:
            NotFoundError: no such object.
        """
        info = await self.head(key)
        return info, self.get_range(key, 0, None, etag=info.etag, chunk_size=chunk_size)

    @abc.abstractmethod
    async def put_object(
        self,
        key: str,
        data: Buffer,
        *,
        if_not_exists: bool,
        checksums: Mapping[str, str],
        content_type: str | None,
    ) -> ObjectInfo:
        """Store ``data`` under ``key`` atomically, recording ``checksums`` with it.

        Raises:
            AlreadyExistsError: ``if_not_exists`` and the key exists.
            IntegrityError: the service verified a checksum and it did not match.
        """

    @abc.abstractmethod
    def list_pages(
        self,
        prefix: str,
        *,
        delimiter: str | None,
        start_after: str | None,
        page_size: int,
    ) -> AsyncIterator[ListPage]:
        """Stream pages of objects whose key starts with ``prefix``, in lexicographic order.

        With a ``delimiter``, keys that contain it after the prefix are rolled up into
        common prefixes (each ending with the delimiter). Listing resumes strictly after
        ``start_after`` when given.
        """

    @abc.abstractmethod
    async def delete_many(self, keys: Sequence[str]) -> dict[str, ObjectError]:
        """Delete ``keys`` (at most 1,000); a missing key is not an error.

        Returns:
            The keys that could not be deleted, each with its error.
        """

    @abc.abstractmethod
    async def copy(self, src: str, dst: str, *, if_not_exists: bool) -> ObjectInfo:
        """Copy ``src`` to ``dst`` inside the service, checksums included."""

    # -- multipart -----------------------------------------------------------------------

    @abc.abstractmethod
    async def create_upload(
        self,
        key: str,
        *,
        content_type: str | None,
        checksum_algorithm: str | None,
        if_not_exists: bool = False,
    ) -> str:
        """Start a multipart upload of ``key``; returns its upload id.

        ``checksum_algorithm`` names the algorithm of the checksums that the parts and the
        completion will carry (``None``: none). ``if_not_exists`` announces that the
        completion will be a conditional create (services that bind the condition to the
        upload session, like GCS, need it here; the others enforce it at completion).
        """

    @abc.abstractmethod
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
        """Store part ``number`` (1-based) of the upload; ``offset`` is its place in the object.

        Repeating a part with the same number replaces it, so a part may be retried.
        """

    @abc.abstractmethod
    async def complete_upload(
        self,
        key: str,
        upload_id: str,
        parts: Sequence[PartInfo],
        *,
        if_not_exists: bool,
        checksums: Mapping[str, str],
    ) -> ObjectInfo:
        """Assemble ``parts`` into ``key`` atomically, recording the whole object's checksums.

        Raises:
            AlreadyExistsError: ``if_not_exists`` and the key exists.
            NotFoundError: the upload id is unknown (completed or aborted already).
        """

    @abc.abstractmethod
    async def abort_upload(self, key: str, upload_id: str) -> None:
        """Abort the upload and free its parts; an unknown upload id is not an error."""

    @abc.abstractmethod
    def list_uploads(self, prefix: str) -> AsyncIterator[UploadInfo]:
        """Multipart uploads started under ``prefix`` and neither completed nor aborted."""

    # -- optional ------------------------------------------------------------------------

    async def signed_url(self, key: str, *, method: str, expires: float) -> str:
        """A URL that grants ``method`` on ``key`` for ``expires`` seconds without credentials."""
        raise UnsupportedOperationError(f"{self.url} does not support signed URLs")
