"""Value types shared by the store and its backends."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime

__all__ = ["Capabilities", "ListPage", "ObjectInfo", "PartInfo", "UploadInfo"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ObjectInfo:
    """What a store knows about one object (or, in a delimited listing, one common prefix).

    Attributes:
        key: the key relative to the store.
        size: size in bytes (0 for a prefix).
        etag: an opaque version tag; changes whenever the content changes.
        last_modified: when the object was last written (UTC), if known.
        checksums: the recorded checksums, by algorithm name (``"crc32c"``, ``"md5"``,
            ``"sha256"``), each base64 of the big-endian digest as S3 and GCS write them.
        version: the service's version id or generation, if it has one.
        content_type: the stored content type, if any.
        is_prefix: ``True`` for a common prefix yielded by ``list(..., delimiter=...)``.
    """

    key: str
    size: int = 0
    etag: str | None = None
    last_modified: datetime | None = None
    checksums: Mapping[str, str] = dataclasses.field(default_factory=dict)
    version: str | None = None
    content_type: str | None = None
    is_prefix: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ListPage:
    """One page of a listing, as a backend returns it (keys relative to the backend)."""

    objects: list[ObjectInfo]
    prefixes: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PartInfo:
    """A stored part of a multipart upload."""

    number: int
    size: int
    etag: str
    checksums: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UploadInfo:
    """A multipart upload that was started and neither completed nor aborted."""

    key: str
    upload_id: str
    initiated: datetime | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Capabilities:
    """What a backend's service allows; :class:`~astore.AsyncStore` plans transfers around it.

    Attributes:
        min_part_size: smallest part except the last (S3: 5 MiB).
        max_part_size: largest part.
        max_parts: most parts in one multipart upload.
        part_alignment: every part but the last must be a multiple of this (GCS: 256 KiB).
        parallel_parts: whether parts may be uploaded concurrently.
        conditional_writes: whether ``if_not_exists`` is enforced atomically by the service.
        native_checksums: algorithms the service records and returns itself.
        signed_urls: whether :meth:`signed_url` is available.
    """

    min_part_size: int = 1
    max_part_size: int = 5 * 1024**3
    max_parts: int = 10_000
    part_alignment: int = 1
    parallel_parts: bool = True
    conditional_writes: bool = True
    native_checksums: frozenset[str] = frozenset()
    signed_urls: bool = False
