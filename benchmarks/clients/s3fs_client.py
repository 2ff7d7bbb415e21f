"""s3fs (peers' venv): ``_put_file`` / ``_get_file`` with the same chunk size and concurrency,
``_pipe_file`` / ``_cat_file`` for small objects (the async API under fsspec's sync one).
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from typing import Any

import s3fs

from clients._common import UNSIGNED_BODY, main_async


class S3fsClient:
    name = "s3fs"
    version = s3fs.__version__

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.bucket = args.bucket
        self.fs = s3fs.S3FileSystem(
            asynchronous=True,
            skip_instance_cache=True,
            key=args.key_id,
            secret=args.secret,
            endpoint_url=args.endpoint,
            client_kwargs={"region_name": args.region},
            config_kwargs={
                "max_pool_connections": max(args.small_concurrency, args.concurrency),
                "s3": UNSIGNED_BODY,
            },
            max_concurrency=args.concurrency,
        )

    async def __aenter__(self) -> S3fsClient:
        await self.fs.set_session()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        creator = getattr(self.fs, "_s3creator", None)
        if creator is not None:
            await creator.__aexit__(None, None, None)

    def _path(self, key: str) -> str:
        return f"{self.bucket}/{key}"

    async def upload(self, path: str, key: str) -> None:
        await self.fs._put_file(
            path,
            self._path(key),
            chunksize=self.args.part_size,
            max_concurrency=self.args.concurrency,
        )

    async def upload_stream(self, source: AsyncIterator[bytes], key: str, size: int) -> None:
        raise SystemExit("s3fs has no async-iterator upload")

    async def download(self, key: str, dest: str) -> None:
        await self.fs._get_file(
            self._path(key),
            dest,
            chunksize=self.args.part_size,
            max_concurrency=self.args.concurrency,
        )

    async def put(self, key: str, data: bytes) -> None:
        await self.fs._pipe_file(self._path(key), data)

    async def get(self, key: str) -> bytes:
        data: bytes = await self.fs._cat_file(self._path(key))
        return data

    async def size_of(self, key: str) -> int:
        self.fs.invalidate_cache()
        return int((await self.fs._info(self._path(key)))["size"])


if __name__ == "__main__":
    main_async(S3fsClient)
