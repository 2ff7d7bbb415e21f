"""astore, in the project's venv.

Variants: ``default`` (CRC32C, ranged parallel download), ``single-stream`` (download as one
stream: ``TransferConfig(parallel_download=False)``), ``no-checksum`` (``checksum=None``).
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from typing import Any

import astore
from clients._common import main_async

VARIANTS = {
    "default": {},
    "single-stream": {"parallel_download": False},
    "no-checksum": {"checksum": None},
}


class AstoreClient:
    name = "astore"
    version = astore.__version__

    def __init__(self, args: argparse.Namespace) -> None:
        if args.variant not in VARIANTS:
            raise SystemExit(f"astore has no variant {args.variant!r}")
        transfer = astore.TransferConfig(
            part_size=args.part_size,
            max_concurrency=args.concurrency,
            **VARIANTS[args.variant],
        )
        self._store = astore.open(
            f"s3://{args.bucket}",
            transfer=transfer,
            endpoint_url=args.endpoint,
            region=args.region,
            aws_access_key_id=args.key_id,
            aws_secret_access_key=args.secret,
        )

    async def __aenter__(self) -> AstoreClient:
        await self._store.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._store.__aexit__(None, None, None)

    async def upload(self, path: str, key: str) -> None:
        await self._store.upload(path, key)

    async def upload_stream(self, source: AsyncIterator[bytes], key: str, size: int) -> None:
        await self._store.upload(source, key)

    async def download(self, key: str, dest: str) -> None:
        await self._store.download(key, dest)

    async def put(self, key: str, data: bytes) -> None:
        await self._store.put(key, data)

    async def get(self, key: str) -> bytes:
        return await self._store.get(key)

    async def size_of(self, key: str) -> int:
        return (await self._store.stat(key)).size


if __name__ == "__main__":
    main_async(AstoreClient)
