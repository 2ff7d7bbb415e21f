"""Crash safety on S3: a process killed mid multipart upload leaves nothing visible."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from typing import Any

import pytest

import astore
from astore import MiB

pytestmark = [pytest.mark.anyio, pytest.mark.s3]

WRITER = textwrap.dedent(
    """
    import json, os, sys, anyio, astore

    async def main():
        url, key, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
        cfg = astore.TransferConfig(part_size=5 * astore.MiB, max_concurrency=2)

        async def slow():
            for i in range(400):
                yield os.urandom(astore.MiB)
                if i == 12:
                    print("parts-started", flush=True)
                await anyio.sleep(0.02)

        async with astore.open(url, transfer=cfg, **options) as store:
            await store.upload(slow(), key)
        print("finished", flush=True)

    anyio.run(main)
    """
)


def kill_mid_upload(url: str, key: str, options: dict[str, Any]) -> None:
    """Run an upload in a child process and SIGKILL it once parts are being sent."""
    import json

    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, url, key, json.dumps(options)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    with proc.stdout:
        line = proc.stdout.readline()
        assert line.strip() == "parts-started", line
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


@pytest.fixture
def s3_url(s3_bucket: str, s3_options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return f"s3://{s3_bucket}/crash", {**s3_options}


async def test_sigkill_mid_upload_leaves_key_absent(s3_url: tuple[str, dict[str, Any]]) -> None:
    """After SIGKILL mid multipart upload the key is absent and the upload is listed."""
    url, options = s3_url
    kill_mid_upload(url, "ckpt.bin", options)
    async with astore.open(url, **options) as store:
        assert not await store.exists("ckpt.bin")
        assert [o async for o in store.list()] == []
        leftovers = [u async for u in store.list_uploads()]
        assert [u.key for u in leftovers] == ["ckpt.bin"]


async def test_sigkill_mid_overwrite_keeps_previous_version(
    s3_url: tuple[str, dict[str, Any]],
) -> None:
    """A writer killed while overwriting leaves the previous version intact and verified."""
    url, options = s3_url
    previous = os.urandom(MiB)
    async with astore.open(url, **options) as store:
        await store.put("ckpt.bin", previous)
    kill_mid_upload(url, "ckpt.bin", options)
    async with astore.open(url, **options) as store:
        assert await store.get("ckpt.bin") == previous
        assert [u.key async for u in store.list_uploads()] == ["ckpt.bin"]


async def test_abort_uploads_removes_the_dead_writers_upload(
    s3_url: tuple[str, dict[str, Any]],
) -> None:
    """abort_uploads(older_than=0) aborts the killed writer's upload; none are left."""
    url, options = s3_url
    kill_mid_upload(url, "ckpt.bin", options)
    async with astore.open(url, **options) as store:
        assert await store.abort_uploads(older_than=0) == 1
        assert [u async for u in store.list_uploads()] == []
        assert not await store.exists("ckpt.bin")
