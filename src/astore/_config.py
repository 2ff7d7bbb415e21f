"""Sizes and the transfer configuration."""

from __future__ import annotations

import dataclasses

__all__ = [
    "DEFAULT_MAX_CONCURRENCY",
    "DEFAULT_MULTIPART_THRESHOLD",
    "DEFAULT_PART_SIZE",
    "GiB",
    "KiB",
    "MiB",
    "TransferConfig",
]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

DEFAULT_PART_SIZE = 8 * MiB
DEFAULT_MULTIPART_THRESHOLD = 16 * MiB
DEFAULT_MAX_CONCURRENCY = 8
CHECKSUM_ALGORITHMS = frozenset({"crc32c", "md5", "sha256"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class TransferConfig:
    """How large transfers are split, and how much memory and concurrency they may use.

    **Memory**: one transfer buffers at most ``part_size * max_concurrency`` bytes (8 MiB x 8
    = 64 MiB by default): a part is read only once a slot is free, and its buffer is released
    as soon as the part is stored. All transfers of one store together buffer at most
    ``max_buffer_bytes``; a producer that would exceed it waits (backpressure) instead of
    buffering more.

    Attributes:
        part_size: bytes per part of a multipart upload and per range of a parallel download.
            Grown automatically when an object would need more parts than the service allows.
        multipart_threshold: objects of at least this size use multipart upload and ranged
            parallel download; smaller ones go in one request.
        max_concurrency: parts or ranges in flight per transfer, and requests in flight per
            store for small-object operations (``max_concurrency * 4``).
        max_buffer_bytes: store-wide budget of buffered bytes across transfers. ``None`` means
            ``part_size * max_concurrency * 2``.
        checksum: the algorithm astore computes for every upload and verifies on every read
            (``"crc32c"``, ``"md5"``, ``"sha256"``, or ``None`` to turn verification off).
        parallel_download: download large objects as concurrent ranged reads (``True``) or as
            one stream (``False``). Ranged reads win on real services; one stream wins on
            servers that copy the whole object for each range.
        chunk_size: size of the chunks a streamed read yields.

    Example:
        >>> TransferConfig(part_size=16 * MiB, max_concurrency=4).max_buffer_bytes
        134217728
    """

    part_size: int = DEFAULT_PART_SIZE
    multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    max_buffer_bytes: int | None = None
    checksum: str | None = "crc32c"
    parallel_download: bool = True
    chunk_size: int = 1 * MiB

    def __post_init__(self) -> None:
        from ._exceptions import ConfigurationError

        for name in ("part_size", "multipart_threshold", "max_concurrency", "chunk_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigurationError(
                    f"TransferConfig.{name} must be a positive int, not {value!r}"
                )
        if self.max_buffer_bytes is None:
            object.__setattr__(self, "max_buffer_bytes", self.part_size * self.max_concurrency * 2)
        elif (
            not isinstance(self.max_buffer_bytes, int)
            or isinstance(self.max_buffer_bytes, bool)
            or self.max_buffer_bytes < self.part_size
        ):
            raise ConfigurationError(
                "TransferConfig.max_buffer_bytes must be an int of at least part_size "
                f"({self.part_size}), not {self.max_buffer_bytes!r}"
            )
        if self.checksum is not None and self.checksum not in CHECKSUM_ALGORITHMS:
            raise ConfigurationError(
                f"TransferConfig.checksum must be one of {sorted(CHECKSUM_ALGORITHMS)} or None, "
                f"not {self.checksum!r}"
            )

    @property
    def buffer_budget(self) -> int:
        """The store-wide buffered-bytes budget, resolved."""
        assert self.max_buffer_bytes is not None
        return self.max_buffer_bytes
