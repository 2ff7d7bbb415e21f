"""obstore (peers' venv): ``put_async`` / ``get_async`` on an ``S3Store``.

Variants: ``default`` (a download is one streamed GET) and ``ranged`` (``--concurrency``
``get_range_async`` calls of ``--part-size`` bytes in flight). File writes go through a
worker thread, so the loop-lag numbers are obstore's, not this runner's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import obstore
from obstore.store import S3Store

from clients._common import bounded, main_async


def _pwrite_all(fd: int, data: Any, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


class ObstoreClient:
    name = "obstore"
    version = obstore.__version__ if hasattr(obstore, "__version__") else "?"

    def __init__(self, args: argparse.Namespace) -> None:
        if args.variant not in ("default", "ranged"):
            raise SystemExit(f"obstore has no variant {args.variant!r}")
        self.args = args
        self.store = S3Store(
            args.bucket,
            endpoint=args.endpoint,
            region=args.region,
            access_key_id=args.key_id,
            secret_access_key=args.secret,
            virtual_hosted_style_request=False,
            client_options={"allow_http": True, "timeout": "600s"},
        )

    async def __aenter__(self) -> ObstoreClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        return None

    async def upload(self, path: str, key: str) -> None:
        await obstore.put_async(
            self.store,
            key,
            Path(path),
            chunk_size=self.args.part_size,
            max_concurrency=self.args.concurrency,
        )

    async def upload_stream(self, source: AsyncIterator[bytes], key: str, size: int) -> None:
        await obstore.put_async(
            self.store,
            key,
            source,
            chunk_size=self.args.part_size,
            max_concurrency=self.args.concurrency,
        )

    async def download(self, key: str, dest: str) -> None:
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            if self.args.variant == "ranged":
                size = await self.size_of(key)
                step = self.args.part_size

                async def fetch(start: int) -> None:
                    end = min(start + step, size)
                    data = await obstore.get_range_async(self.store, key, start=start, end=end)
                    await asyncio.to_thread(_pwrite_all, fd, data, start)

                await bounded(self.args.concurrency, range(0, size, step), fetch)
            else:
                resp = await obstore.get_async(self.store, key)
                offset = 0
                async for chunk in resp.stream(min_chunk_size=1024 * 1024):
                    await asyncio.to_thread(_pwrite_all, fd, chunk, offset)
                    offset += len(chunk)
        finally:
            os.close(fd)

    async def put(self, key: str, data: bytes) -> None:
        await obstore.put_async(self.store, key, data)

    async def get(self, key: str) -> bytes:
        resp = await obstore.get_async(self.store, key)
        return (await resp.bytes_async()).to_bytes()

    async def size_of(self, key: str) -> int:
        meta = await obstore.head_async(self.store, key)
        return int(meta["size"])


if __name__ == "__main__":
    main_async(ObstoreClient)
