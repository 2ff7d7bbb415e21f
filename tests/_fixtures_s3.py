"""S3 fixtures: one moto server process per session on a free loopback port, reset per test.

``s3_store_args`` gives ``(url, options)`` for a fresh empty bucket; ``s3_client`` is a plain
aiobotocore client on the same server, for interoperability tests.
"""

from __future__ import annotations

import itertools
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

S3_REGION = "us-east-1"
S3_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
_STARTUP_TIMEOUT = 60.0
_buckets = itertools.count()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _moto_command(port: int) -> list[str]:
    """moto's server next to this interpreter, else the module form."""
    bindir = Path(sys.executable).parent
    exe = bindir / "moto_server"
    if not exe.exists():
        found = shutil.which("moto_server", path=str(bindir))
        exe = Path(found) if found else exe
    args = ["-H", "127.0.0.1", "-p", str(port)]
    if exe.exists():
        return [str(exe), *args]
    return [sys.executable, "-m", "moto.server", *args]


def _request(url: str, method: str = "GET") -> int:
    req = urllib.request.Request(url, method=method, data=b"" if method != "GET" else None)
    with urllib.request.urlopen(req, timeout=10) as resp:
        status: int = resp.status
        return status


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """URL of a moto S3 server process started for this test session."""
    pytest.importorskip("moto.server")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        _moto_command(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + _STARTUP_TIMEOUT
        while True:
            if proc.poll() is not None:
                pytest.fail(f"moto server exited at startup with code {proc.returncode}")
            try:
                _request(f"{url}/moto-api/data.json")
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("moto server did not answer within 60 s")
                time.sleep(0.05)  # polling for readiness, not synchronising a test
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def s3_bucket(s3_endpoint: str) -> str:
    """A fresh, empty bucket on a freshly reset moto server."""
    _request(f"{s3_endpoint}/moto-api/reset", "POST")
    bucket = f"astore-test-{next(_buckets)}"
    _request(f"{s3_endpoint}/{bucket}", "PUT")  # moto does not check signatures
    return bucket


@pytest.fixture
def s3_options(s3_endpoint: str) -> dict[str, Any]:
    """Options for ``astore.open("s3://...")`` or ``S3Backend`` pointing at the moto server."""
    return {"endpoint_url": s3_endpoint, "region": S3_REGION, **S3_CREDENTIALS}


@pytest.fixture
def s3_store_args(s3_bucket: str, s3_options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(url, options)`` of a store on a fresh empty bucket, under a key prefix."""
    return f"s3://{s3_bucket}/some-prefix", dict(s3_options)


@pytest.fixture
async def s3_client(s3_endpoint: str) -> AsyncIterator[Any]:
    """A plain aiobotocore S3 client on the moto server (for interoperability tests)."""
    from aiobotocore.session import AioSession

    session = AioSession()
    async with session.create_client(
        "s3", endpoint_url=s3_endpoint, region_name=S3_REGION, **S3_CREDENTIALS
    ) as client:
        yield client
