"""Plain aiobotocore: the floor astore is built on (runs in the project's venv, same version).

What a careful user writes by hand: a multipart upload with ``--concurrency`` parts in
flight (parts read off the loop), a download as one streamed GET written off the loop, and
botocore's default configuration (its own request checksums and retries).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiobotocore
from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession

from clients._common import UNSIGNED_BODY, main_async

CHUNK = 1024 * 1024


class AiobotocoreClient:
    name = "aiobotocore"
    version = aiobotocore.__version__

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.bucket = args.bucket
        self._cm: Any = None
        self.s3: Any = None

    async def __aenter__(self) -> AiobotocoreClient:
        a = self.args
        self._cm = AioSession().create_client(
            "s3",
            endpoint_url=a.endpoint,
            region_name=a.region,
            aws_access_key_id=a.key_id,
            aws_secret_access_key=a.secret,
            config=AioConfig(
                max_pool_connections=max(a.small_concurrency, a.concurrency), s3=UNSIGNED_BODY
            ),
        )
        self.s3 = await self._cm.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._cm.__aexit__(None, None, None)

    async def _multipart(self, key: str, next_part: Any) -> None:
        """Upload parts from ``next_part()`` (None at the end), ``concurrency`` at once."""
        upload = await self.s3.create_multipart_upload(Bucket=self.bucket, Key=key)
        upload_id = upload["UploadId"]
        etags: dict[int, str] = {}
        lock = asyncio.Lock()
        counter = iter(range(1, 10_001))

        async def worker() -> None:
            while True:
                async with lock:  # parts are read in order, one at a time
                    data = await next_part()
                    number = next(counter)
                if data is None:
                    return
                r = await self.s3.upload_part(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data
                )
                etags[number] = r["ETag"]

        try:
            await asyncio.gather(*(worker() for _ in range(self.args.concurrency)))
        except BaseException:
            await self.s3.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            raise
        parts = [{"PartNumber": n, "ETag": etags[n]} for n in sorted(etags)]
        await self.s3.complete_multipart_upload(
            Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
        )

    async def upload(self, path: str, key: str) -> None:
        part_size = self.args.part_size
        with open(path, "rb") as f:

            async def next_part() -> bytes | None:
                data = await asyncio.to_thread(f.read, part_size)
                return data or None

            await self._multipart(key, next_part)

    async def upload_stream(self, source: AsyncIterator[bytes], key: str, size: int) -> None:
        part_size = self.args.part_size
        pending = bytearray()
        done = False

        async def next_part() -> bytes | None:
            nonlocal done, pending
            while not done and len(pending) < part_size:
                try:
                    pending += await anext(source)
                except StopAsyncIteration:
                    done = True
            if not pending:
                return None
            data = bytes(pending[:part_size])
            del pending[:part_size]
            return data

        await self._multipart(key, next_part)

    async def download(self, key: str, dest: str) -> None:
        r = await self.s3.get_object(Bucket=self.bucket, Key=key)
        with open(dest, "wb") as f:
            async with r["Body"] as body:
                while chunk := await body.read(CHUNK):
                    await asyncio.to_thread(f.write, chunk)

    async def put(self, key: str, data: bytes) -> None:
        await self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)

    async def get(self, key: str) -> bytes:
        r = await self.s3.get_object(Bucket=self.bucket, Key=key)
        async with r["Body"] as body:
            data: bytes = await body.read()
        return data

    async def size_of(self, key: str) -> int:
        r = await self.s3.head_object(Bucket=self.bucket, Key=key)
        return int(r["ContentLength"])


if __name__ == "__main__":
    main_async(AiobotocoreClient)
