"""Checksums: CRC32C (default), MD5 and SHA-256, and the CPU bridge that keeps them off the loop.

CRC32C uses the ``crc32c`` package rather than ``google-crc32c``: it accepts any buffer
(``bytes``, ``bytearray``, ``memoryview``) without a copy, releases the GIL, and runs on the
CPU's CRC instructions (about 2 GB/s per core here). Part checksums are combined into the
whole object's checksum arithmetically (:func:`crc32c_combine`), so no byte is read twice.

Values are exchanged as base64 of the big-endian digest, the form S3 and GCS use.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Protocol

import anyio
import anyio.to_thread
import crc32c as _crc32c

from ._config import CHECKSUM_ALGORITHMS

__all__ = [
    "Hasher",
    "crc32c_combine",
    "decode_crc32c",
    "encode_crc32c",
    "hash_bytes",
    "new_hasher",
    "pick_algorithm",
    "update_off_loop",
]

# Buffers at least this large are hashed in a worker thread; below it the thread hop costs
# more than the hash (CRC32C of 256 KiB takes ~0.1 ms).
OFF_LOOP_THRESHOLD = 256 * 1024

_POLY = 0x82F63B78  # CRC32C (Castagnoli), reflected


def _multmodp(a: int, b: int) -> int:
    """Multiply two polynomials modulo the CRC polynomial (reflected bit order)."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return p


def _x2n_table() -> list[int]:
    table = [1 << 30]  # x^1
    for _ in range(31):
        table.append(_multmodp(table[-1], table[-1]))
    return table


_X2N = _x2n_table()


def _x2nmodp(n: int, k: int) -> int:
    """x^(n * 2^k) modulo the CRC polynomial."""
    p = 1 << 31  # x^0
    while n:
        if n & 1:
            p = _multmodp(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return p


def crc32c_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC32C of ``A + B`` from ``crc(A)``, ``crc(B)`` and ``len(B)``, without the data."""
    return _multmodp(_x2nmodp(len2, 3), crc1) ^ crc2


def encode_crc32c(value: int) -> str:
    """Base64 of the big-endian CRC32C, as S3 and GCS write it."""
    return base64.b64encode(value.to_bytes(4, "big")).decode("ascii")


def decode_crc32c(value: str) -> int:
    """Inverse of :func:`encode_crc32c`."""
    return int.from_bytes(base64.b64decode(value), "big")


class Hasher(Protocol):
    """An incremental checksum."""

    algorithm: str

    def update(self, data: bytes | bytearray | memoryview) -> None: ...

    def value(self) -> str: ...


class Crc32cHasher:
    """Incremental CRC32C that can also absorb an already computed CRC of the next bytes."""

    algorithm = "crc32c"

    def __init__(self) -> None:
        self.crc = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self.crc = _crc32c.crc32c(data, self.crc)

    def extend(self, crc: int, length: int) -> None:
        """Append bytes whose CRC32C is ``crc`` (computed elsewhere, e.g. in parallel)."""
        self.crc = crc32c_combine(self.crc, crc, length)

    def value(self) -> str:
        return encode_crc32c(self.crc)


class _HashlibHasher:
    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm
        self._h = hashlib.new(algorithm)

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self._h.update(data)

    def value(self) -> str:
        return base64.b64encode(self._h.digest()).decode("ascii")


def new_hasher(algorithm: str) -> Hasher:
    """A fresh hasher for ``"crc32c"``, ``"md5"`` or ``"sha256"``."""
    if algorithm == "crc32c":
        return Crc32cHasher()
    if algorithm in CHECKSUM_ALGORITHMS:
        return _HashlibHasher(algorithm)
    raise ValueError(f"unknown checksum algorithm {algorithm!r}")


def hash_bytes(algorithm: str, data: bytes | bytearray | memoryview) -> str:
    """The checksum of ``data`` in one call (runs on the calling thread)."""
    h = new_hasher(algorithm)
    h.update(data)
    return h.value()


async def update_off_loop(
    hasher: Hasher,
    data: bytes | bytearray | memoryview,
    limiter: anyio.CapacityLimiter | None,
) -> None:
    """Feed ``data`` to ``hasher``; large buffers in a worker thread so the loop never stalls."""
    if len(data) >= OFF_LOOP_THRESHOLD:
        await anyio.to_thread.run_sync(hasher.update, data, limiter=limiter)
    else:
        hasher.update(data)


def pick_algorithm(recorded: Mapping[str, str], preferred: str | None) -> str | None:
    """The algorithm to verify a read with: the preferred one if recorded, else the cheapest."""
    if preferred is None:
        return None
    if preferred in recorded:
        return preferred
    for algorithm in ("crc32c", "sha256", "md5"):
        if algorithm in recorded:
            return algorithm
    return None


class ObjectDigest:
    """Checksums of an object fed part by part, in order: each part's own, and the whole's.

    With CRC32C every byte is hashed once (the part CRCs are combined); MD5 and SHA-256 hash
    each part twice (once for the part, once into the whole), since they cannot be combined.
    :meth:`part` is called from a worker thread for large parts.
    """

    def __init__(self, algorithm: str | None) -> None:
        self.algorithm = algorithm
        self._length = 0
        self._crc = Crc32cHasher() if algorithm == "crc32c" else None
        self._whole = new_hasher(algorithm) if algorithm not in (None, "crc32c") else None

    def part(self, data: bytes | bytearray | memoryview) -> dict[str, str]:
        """Hash the next part; returns the part's checksums."""
        if self.algorithm is None:
            return {}
        if self._crc is not None:
            crc = _crc32c.crc32c(data)
            if self._length:
                self._crc.extend(crc, len(data))
            else:
                self._crc.crc = crc  # the first part needs no combining
            self._length += len(data)
            return {"crc32c": encode_crc32c(crc)}
        assert self._whole is not None
        self._whole.update(data)
        return {self.algorithm: hash_bytes(self.algorithm, data)}

    def whole(self) -> dict[str, str]:
        """The checksums of everything fed so far."""
        if self._crc is not None:
            return {"crc32c": self._crc.value()}
        if self._whole is not None:
            return {self._whole.algorithm: self._whole.value()}
        return {}
