"""aioboto3 (peers' venv): ``upload_file`` / ``download_file`` with boto3's TransferConfig."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from typing import Any

import aioboto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from clients._common import UNSIGNED_BODY, main_async


class Aioboto3Client:
    name = "aioboto3"
    version = aioboto3.__version__

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.bucket = args.bucket
        self.transfer = TransferConfig(
            multipart_threshold=args.part_size,
            multipart_chunksize=args.part_size,
            max_concurrency=args.concurrency,
        )
        self._cm: Any = None
        self.s3: Any = None

    async def __aenter__(self) -> Aioboto3Client:
        a = self.args
        self._cm = aioboto3.Session().client(
            "s3",
            endpoint_url=a.endpoint,
            region_name=a.region,
            aws_access_key_id=a.key_id,
            aws_secret_access_key=a.secret,
            config=Config(
                max_pool_connections=max(a.small_concurrency, a.concurrency), s3=UNSIGNED_BODY
            ),
        )
        self.s3 = await self._cm.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._cm.__aexit__(None, None, None)

    async def upload(self, path: str, key: str) -> None:
        await self.s3.upload_file(path, self.bucket, key, Config=self.transfer)

    async def upload_stream(self, source: AsyncIterator[bytes], key: str, size: int) -> None:
        raise SystemExit("aioboto3 has no async-iterator upload")

    async def download(self, key: str, dest: str) -> None:
        await self.s3.download_file(self.bucket, key, dest, Config=self.transfer)

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
    main_async(Aioboto3Client)
