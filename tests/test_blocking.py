"""No blocking call runs on the event loop: file I/O and hashing go through worker threads."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from blockbuster import BlockBuster, blockbuster_ctx

import astore
from astore import MiB

pytestmark = pytest.mark.anyio


@pytest.fixture
def blockbuster() -> Iterator[BlockBuster]:
    """Raise BlockingError on any blocking call made by astore's code on the loop."""
    with blockbuster_ctx("astore") as bb:
        yield bb


@pytest.mark.parametrize("kind", ["memory", "local"])
async def test_store_operations_never_block_the_loop(
    kind: str, tmp_path: Path, blockbuster: BlockBuster
) -> None:
    """Every store operation, small and multipart, runs without blocking the event loop."""
    url = "memory://blocking" if kind == "memory" else str(tmp_path / "store")
    big = os.urandom(13 * MiB)
    source_file = tmp_path / "src.bin"
    blockbuster.deactivate()  # the test's own setup may block
    source_file.write_bytes(big)
    blockbuster.activate()

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(big), MiB):
            yield big[i : i + MiB]

    cfg = astore.TransferConfig(part_size=5 * MiB, multipart_threshold=6 * MiB)
    async with astore.open(url, transfer=cfg) as store:
        await store.put("small", b"x" * 100)
        assert await store.get("small") == b"x" * 100
        await store.put("big", big)
        await store.upload(chunks(), "iter")
        await store.upload(source_file, "file")
        await store.download("iter", tmp_path / "out.bin")
        sizes = [len(c) async for c in store.iter_bytes("file", chunk_size=4 * MiB)]
        assert sizes[0] == 4 * MiB
        assert len([o async for o in store.list()]) == 4
        await store.copy("small", "copy")
        await store.delete_many(["copy", "small"])
        assert await store.stat("big")
