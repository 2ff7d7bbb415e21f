"""A 200 MiB streamed upload and download stay within the transfer's memory budget (S3, GCS)."""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import astore
from astore import MiB

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CFG = astore.TransferConfig(part_size=8 * MiB, multipart_threshold=8 * MiB, max_concurrency=4)
SIZE = 200 * MiB
SLACK = 12 * MiB  # interpreter, HTTP client buffers and bookkeeping


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "backend",
    [pytest.param("s3", marks=pytest.mark.s3), pytest.param("gcs", marks=pytest.mark.gcs)],
)
async def test_200_mib_stream_up_and_down_within_budget(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Peak traced memory of a 200 MiB upload and download stays under the budget plus slack."""
    url, options = request.getfixturevalue(f"{backend}_store_args")
    block = os.urandom(MiB)
    bound = CFG.part_size * CFG.max_concurrency

    async def source() -> AsyncIterator[bytes]:
        for i in range(SIZE // MiB):
            yield i.to_bytes(4, "big") + block[4:]

    store_options: dict[str, Any] = {"transfer": CFG, **options}
    async with astore.open(url, **store_options) as store:
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            await store.upload(source(), "big.bin")
            _, upload_peak = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            await store.download("big.bin", tmp_path / "big.bin")
            _, download_peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert (tmp_path / "big.bin").stat().st_size == SIZE
    with open(tmp_path / "big.bin", "rb") as f:
        f.seek(150 * MiB)
        assert f.read(4) == (150).to_bytes(4, "big")
    assert upload_peak < bound + SLACK, f"upload peak {upload_peak / MiB:.1f} MiB"
    assert download_peak < bound + SLACK, f"download peak {download_peak / MiB:.1f} MiB"
    print(
        f"\n{backend}: upload peak {upload_peak / MiB:.1f} MiB, download peak "
        f"{download_peak / MiB:.1f} MiB, budget {bound / MiB:.0f} MiB"
    )
