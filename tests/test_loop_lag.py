"""The event loop stays responsive while large uploads are checksummed."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

import astore
from astore import MiB

pytestmark = pytest.mark.anyio


async def heartbeat(lags: list[float], stop: anyio.Event, interval: float = 0.001) -> None:
    """Sleep ``interval`` repeatedly and record how late each wake-up was."""
    while not stop.is_set():
        t0 = time.perf_counter()
        await anyio.sleep(interval)
        lags.append(time.perf_counter() - t0 - interval)


async def p99_lag_during_upload(root: Path, checksum: str | None) -> tuple[float, int]:
    """p99 heartbeat lateness while 256 MiB are uploaded, and the number of beats."""
    cfg = astore.TransferConfig(part_size=8 * MiB, max_concurrency=4, checksum=checksum)
    block = bytes(range(256)) * 4096  # 1 MiB

    async def source() -> AsyncIterator[bytes]:
        for _ in range(256):
            yield block

    lags: list[float] = []
    stop = anyio.Event()
    async with astore.open(root, transfer=cfg, fsync=False) as store:
        async with anyio.create_task_group() as tg:
            tg.start_soon(heartbeat, lags, stop)
            await store.upload(source(), "big.bin")
            stop.set()
        assert (await store.stat("big.bin")).size == 256 * MiB
    lags.sort()
    return lags[int(len(lags) * 0.99)], len(lags)


@pytest.mark.slow
async def test_checksumming_adds_no_loop_lag_during_256_mib_upload(tmp_path: Path) -> None:
    """CRC32C of a 256 MiB upload runs off the loop: heartbeat lag is that of no checksum."""
    # A ratio against the same upload without checksums, not an absolute bound: CI machines
    # are shared. Hashing 8 MiB parts on the loop would add ~4 ms per part to every beat.
    base, _ = await p99_lag_during_upload(tmp_path / "none", None)
    with_crc, beats = await p99_lag_during_upload(tmp_path / "crc", "crc32c")
    assert beats > 50
    assert with_crc < max(3 * base, 0.05), f"p99 {with_crc * 1000:.1f} ms vs {base * 1000:.1f} ms"
