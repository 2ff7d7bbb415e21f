"""Deadlines: an operation against a server that never answers fails in time, never hangs.

The silent server is a loopback socket that accepts connections, reads what it is sent and
never replies. Timings use generous slack: only "not a hang" is asserted, never speed.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import astore
from _fixtures_s3 import S3_CREDENTIALS, S3_REGION

pytestmark = pytest.mark.anyio

DEADLINE = 2.0
SLACK = 10.0  # loaded CI machines: far more than needed, far less than a hang


class SilentServer:
    """Accepts TCP connections on a free loopback port and never sends a byte."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.port: int = self.sock.getsockname()[1]
        self.accepted = 0
        self._conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.setblocking(False)
            self._conns.append(conn)
            self.accepted += 1
            for c in self._conns:  # drain so that senders never block on a full buffer
                try:
                    while c.recv(1 << 16):
                        pass
                except (BlockingIOError, OSError):
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for conn in self._conns:
            conn.close()
        self.sock.close()


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


def policy(deadline: float = DEADLINE) -> astore.RetryPolicy:
    return astore.RetryPolicy(
        max_attempts=100, initial_backoff=0.01, max_backoff=0.1, deadline=deadline
    )


def s3_options(server: SilentServer, **extra: Any) -> dict[str, Any]:
    return {"endpoint_url": server.url, "region": S3_REGION, **S3_CREDENTIALS, **extra}


def gcs_options(server: SilentServer, **extra: Any) -> dict[str, Any]:
    return {"emulator_host": server.url, **extra}


BACKENDS = {
    "s3": ("s3://silent-bucket", s3_options),
    "gcs": ("gs://silent-bucket", gcs_options),
}


@pytest.fixture(params=["s3", "gcs"])
def target(request: pytest.FixtureRequest, silent: SilentServer) -> tuple[str, Any]:
    url, options = BACKENDS[request.param]
    return url, options


@pytest.mark.parametrize("operation", ["put", "get", "stat", "download"])
async def test_silent_server_fails_within_deadline(
    target: tuple[str, Any], silent: SilentServer, operation: str, tmp_path: Path
) -> None:
    """A request to a server that never answers raises RequestTimeoutError by the deadline."""
    url, options = target
    async with astore.open(url, retry=policy(), **options(silent)) as store:
        started = time.monotonic()
        calls = {
            "put": lambda: store.put("k", b"x" * 1000),
            "get": lambda: store.get("k"),
            "stat": lambda: store.stat("k"),
            "download": lambda: store.download("k", tmp_path / "k"),
        }
        with pytest.raises(astore.RequestTimeoutError):
            await calls[operation]()
        elapsed = time.monotonic() - started
    assert elapsed < DEADLINE + SLACK
    assert silent.accepted >= 1
    assert list(tmp_path.iterdir()) == []


async def test_list_on_silent_server_fails_within_deadline(
    target: tuple[str, Any], silent: SilentServer
) -> None:
    """Listing a server that never answers raises RequestTimeoutError by the deadline."""
    url, options = target
    async with astore.open(url, retry=policy(), **options(silent)) as store:
        with anyio.move_on_after(DEADLINE + SLACK) as scope:
            with pytest.raises(astore.RequestTimeoutError):
                [o async for o in store.list()]
    assert not scope.cancelled_caught, "list() was still waiting long after its deadline"


async def test_short_read_timeouts_are_retried_until_the_deadline(
    target: tuple[str, Any], silent: SilentServer
) -> None:
    """With per-read timeouts shorter than the deadline, timed-out attempts are retried."""
    url, options = target
    name = url.split(":", 1)[0]
    extra = {"read_timeout": 0.3} if name == "s3" else {"timeout": 0.3}
    async with astore.open(url, retry=policy(3.0), **options(silent, **extra)) as store:
        started = time.monotonic()
        with pytest.raises(astore.RequestTimeoutError) as info:
            await store.stat("k")
        elapsed = time.monotonic() - started
        assert store.stats["retries"] >= 1
    assert elapsed < 3.0 + SLACK
    assert silent.accepted >= 2
    assert any("retried" in note for note in getattr(info.value, "__notes__", []))


async def test_put_attempts_time_out_per_read_s3(silent: SilentServer) -> None:
    """An S3 put to a silent server times out after read_timeout and is retried."""
    options = s3_options(silent, read_timeout=0.3)
    async with astore.open("s3://silent-bucket", retry=policy(3.0), **options) as store:
        with pytest.raises(astore.RequestTimeoutError):
            await store.put("k", b"x" * 1000)
        assert store.stats["retries"] >= 1


async def test_large_upload_to_silent_server_fails_within_deadline(
    target: tuple[str, Any], silent: SilentServer
) -> None:
    """A multipart upload to a server that never answers fails by the deadline, not hangs."""
    url, options = target
    cfg = astore.TransferConfig(
        part_size=5 * astore.MiB, multipart_threshold=6 * astore.MiB, max_concurrency=2
    )
    async with astore.open(url, transfer=cfg, retry=policy(), **options(silent)) as store:
        started = time.monotonic()
        with pytest.raises(astore.RequestTimeoutError):
            await store.put("big", bytes(12 * astore.MiB))
        elapsed = time.monotonic() - started
    # The abort after the failure is bounded too (astore gives it 30 s at most).
    assert elapsed < DEADLINE + 30 + SLACK
