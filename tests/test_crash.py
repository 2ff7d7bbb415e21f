"""Crash safety: a process killed mid-upload leaves nothing under the final key."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

import astore
from astore import MiB

WRITER = textwrap.dedent(
    """
    import os, sys, anyio, astore

    async def main():
        url, key = sys.argv[1], sys.argv[2]
        cfg = astore.TransferConfig(part_size=5 * astore.MiB, max_concurrency=2)

        async def slow():
            for i in range(400):
                yield os.urandom(astore.MiB)
                if i == 12:
                    print("parts-started", flush=True)
                await anyio.sleep(0.02)

        async with astore.open(url, transfer=cfg, fsync=False) as store:
            await store.upload(slow(), key)
        print("finished", flush=True)

    anyio.run(main)
    """
)


def kill_mid_upload(url: str, key: str) -> None:
    """Run an upload in a child process and SIGKILL it once parts are being written."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, url, key], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    with proc.stdout:
        line = proc.stdout.readline()
        assert line.strip() == "parts-started", line
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def test_sigkill_mid_upload_leaves_key_absent(tmp_path: Path) -> None:
    """After SIGKILL mid-upload the key does not exist; reopening removes the leftovers."""
    root = tmp_path / "store"
    kill_mid_upload(str(root), "ckpt.bin")
    assert not (root / "ckpt.bin").exists()
    leftovers = list((root / ".astore" / "uploads").iterdir())
    assert len(leftovers) == 1  # the dead writer's upload, invisible to readers

    async def reopen() -> None:
        async with astore.open(root) as store:
            assert not await store.exists("ckpt.bin")
            assert [o async for o in store.list()] == []
            assert [u async for u in store.list_uploads()] == []

    anyio.run(reopen)
    assert list((root / ".astore" / "uploads").iterdir()) == []
    assert list((root / ".astore" / "tmp").iterdir()) == []


def test_sigkill_mid_overwrite_keeps_previous_version(tmp_path: Path) -> None:
    """A writer killed while overwriting leaves the previous version intact and verified."""
    root = tmp_path / "store"

    async def seed() -> None:
        async with astore.open(root) as store:
            await store.put("ckpt.bin", b"version-1" * 1000)

    anyio.run(seed)
    kill_mid_upload(str(root), "ckpt.bin")

    async def check() -> None:
        async with astore.open(root) as store:
            assert await store.get("ckpt.bin") == b"version-1" * 1000

    anyio.run(check)


def test_abort_uploads_removes_stale_uploads() -> None:
    """abort_uploads() aborts incomplete uploads older than the given age, and only those."""

    async def run() -> None:
        async with astore.open("memory://stale") as store:
            upload_id = await store.backend.create_upload(
                "old", content_type=None, checksum_algorithm=None
            )
            assert [u.upload_id async for u in store.list_uploads()] == [upload_id]
            assert await store.abort_uploads(older_than=3600) == 0
            time.sleep(0.01)
            assert await store.abort_uploads(older_than=0.001) == 1
            assert [u async for u in store.list_uploads()] == []

    anyio.run(run)


@pytest.mark.slow
def test_10000_small_objects_with_concurrency_64(tmp_path: Path) -> None:
    """10,000 small objects upload and list correctly with max_concurrency=64, leaking no fds."""
    cfg = astore.TransferConfig(max_concurrency=64)
    fds_before = len(os.listdir("/proc/self/fd"))
    keys = [f"small/{i:05d}.json" for i in range(10_000)]

    async def run() -> list[str]:
        async with astore.open(tmp_path / "store", transfer=cfg, fsync=False) as store:
            limiter = anyio.CapacityLimiter(64)

            async def put(key: str) -> None:
                async with limiter:
                    await store.put(key, key.encode() * 10)

            async with anyio.create_task_group() as tg:
                for key in keys:
                    tg.start_soon(put, key)
            listed = [o.key async for o in store.list("small/")]
            assert await store.get(keys[1234]) == keys[1234].encode() * 10
            return listed

    assert anyio.run(run) == keys
    assert len(os.listdir("/proc/self/fd")) <= fds_before + 2
    assert not any(p.name.startswith(".") for p in (tmp_path / "store" / "small").iterdir())
    assert MiB  # sizes are bytes throughout
