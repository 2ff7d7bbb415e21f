"""boto3 + s3transfer (peers' venv): threads, ``TransferConfig`` with the same part size and
concurrency; small objects on a pool of ``--small-concurrency`` threads sharing one client.
"""

from __future__ import annotations

import argparse
from typing import Any

import boto3
import s3transfer
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from clients._common import UNSIGNED_BODY, main_sync


class Boto3Client:
    name = "boto3"
    version = f"{boto3.__version__} (s3transfer {s3transfer.__version__})"

    def __init__(self, args: argparse.Namespace) -> None:
        self.bucket = args.bucket
        self.transfer = TransferConfig(
            multipart_threshold=args.part_size,
            multipart_chunksize=args.part_size,
            max_concurrency=args.concurrency,
        )
        self.s3 = boto3.client(
            "s3",
            endpoint_url=args.endpoint,
            region_name=args.region,
            aws_access_key_id=args.key_id,
            aws_secret_access_key=args.secret,
            config=Config(
                max_pool_connections=max(args.small_concurrency, args.concurrency),
                s3=UNSIGNED_BODY,
            ),
        )

    def __enter__(self) -> Boto3Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.s3.close()

    def upload(self, path: str, key: str) -> None:
        self.s3.upload_file(path, self.bucket, key, Config=self.transfer)

    def download(self, key: str, dest: str) -> None:
        self.s3.download_file(self.bucket, key, dest, Config=self.transfer)

    def put(self, key: str, data: bytes) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)

    def get(self, key: str) -> bytes:
        data: bytes = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return data

    def size_of(self, key: str) -> int:
        return int(self.s3.head_object(Bucket=self.bucket, Key=key)["ContentLength"])


if __name__ == "__main__":
    main_sync(Boto3Client)
