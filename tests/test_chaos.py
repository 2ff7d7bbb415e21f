"""Faults on the wire, against the real server processes (moto, fake-gcs-server).

A :class:`~chaos_proxy.ChaosProxy` sits between astore and the server and injects transient
faults (5xx, throttling with Retry-After, latency, connections reset in request and response
bodies, truncated responses) or flipped bits. Transient faults must be survived with every
byte intact; flipped bits must be caught by verification.

The figures of ``test_200_uploads_survive_15_percent_wire_faults`` are printed (run with
``-s``) and quoted in ``docs/reliability.md``.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import astore
from _fixtures_gcs import Emulator
from _fixtures_s3 import S3_CREDENTIALS, S3_REGION
from astore import MiB
from chaos_proxy import ChaosProxy

pytestmark = pytest.mark.anyio

RATE = 0.15
CHAOS_RETRY = astore.RetryPolicy(
    max_attempts=10, initial_backoff=0.001, max_backoff=0.02, deadline=120
)
CFG = astore.TransferConfig(part_size=5 * MiB, multipart_threshold=6 * MiB, max_concurrency=4)
N_OBJECTS = 200
PARALLEL = 4


@pytest.fixture
def s3_proxy(s3_endpoint: str) -> Iterator[ChaosProxy]:
    """A chaos proxy in front of the moto server (no faults until a test sets a rate)."""
    with ChaosProxy(s3_endpoint, flavor="s3", seed=7) as proxy:
        yield proxy


@pytest.fixture
def gcs_proxy(fake_gcs_server: Emulator) -> Iterator[ChaosProxy]:
    """A chaos proxy in front of fake-gcs-server, answering resumable status queries."""
    with ChaosProxy(fake_gcs_server.root, flavor="gcs", seed=7, gcs_status_shim=True) as proxy:
        yield proxy


@pytest.fixture(params=["s3", "gcs"])
def chaos(request: pytest.FixtureRequest) -> tuple[str, str, dict[str, Any], ChaosProxy]:
    """``(name, url, options, proxy)`` of a fresh bucket reached through a chaos proxy."""
    name: str = request.param
    request.applymarker(getattr(pytest.mark, name))
    if name == "s3":
        bucket: str = request.getfixturevalue("s3_bucket")
        proxy: ChaosProxy = request.getfixturevalue("s3_proxy")
        options = {"endpoint_url": proxy.url, "region": S3_REGION, **S3_CREDENTIALS}
        return name, f"s3://{bucket}/chaos", options, proxy
    emulator: Emulator = request.getfixturevalue("fake_gcs_server")
    proxy = request.getfixturevalue("gcs_proxy")
    return name, f"gs://{emulator.new_bucket()}/chaos", {"emulator_host": proxy.url}, proxy


def object_sizes(seed: int, count: int) -> list[int]:
    """Mostly small objects (0 B to 1 MiB, log-spread), one in five multipart-sized (6-30 MiB)."""
    rng = random.Random(seed)
    sizes = []
    for i in range(count):
        if i % 5 == 4:
            sizes.append(rng.randint(6 * MiB, 30 * MiB))
        elif i % 40 == 0:
            sizes.append(0)
        else:
            sizes.append(int(2 ** rng.uniform(0, 20)))
    return sizes


def payload(seed: int, index: int, size: int) -> bytes:
    return random.Random(seed * 100_003 + index).randbytes(size)


async def pieces(data: bytes, rng: random.Random) -> AsyncIterator[bytes]:
    pos = 0
    while pos < len(data):
        step = rng.randint(1, MiB)
        yield data[pos : pos + step]
        pos += step


async def run_workload(
    store: astore.AsyncStore, tmp_path: Path, *, seed: int, count: int
) -> tuple[int, float]:
    """Upload ``count`` objects (bytes, files, async iterators), read each back, compare."""
    sizes = object_sizes(seed, count)
    limiter = anyio.CapacityLimiter(PARALLEL)
    started = time.monotonic()

    async def upload(i: int) -> None:
        async with limiter:
            data = payload(seed, i, sizes[i])
            key = f"obj/{i:03d}"
            if i % 3 == 0:
                await store.put(key, data)
            elif i % 3 == 1:
                path = tmp_path / f"src-{i}"
                path.write_bytes(data)
                await store.upload(path, key)
                path.unlink()
            else:
                await store.upload(pieces(data, random.Random(i)), key)

    async def read_back(i: int) -> None:
        async with limiter:
            data = payload(seed, i, sizes[i])
            key = f"obj/{i:03d}"
            if i % 2 == 0:
                got = await store.get(key)
            else:
                dest = tmp_path / f"dst-{i}"
                await store.download(key, dest)
                got = dest.read_bytes()
                dest.unlink()
            assert got == data, f"{key} ({len(data)} bytes) read back different bytes"

    async with anyio.create_task_group() as tg:
        for i in range(count):
            tg.start_soon(upload, i)
    async with anyio.create_task_group() as tg:
        for i in range(count):
            tg.start_soon(read_back, i)
    return sum(sizes), time.monotonic() - started


def lost_creates(proxy: ChaosProxy) -> int:
    """CreateMultipartUpload requests that reached S3 but whose answer the proxy cut."""
    return sum(
        1
        for method, path, fault in proxy.events
        if method == "POST"
        and path.endswith("?uploads")
        and fault in ("reset_response", "truncate")
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_200_uploads_survive_15_percent_wire_faults(
    chaos: tuple[str, str, dict[str, Any], ChaosProxy], tmp_path: Path
) -> None:
    """200 uploads (0 B-30 MiB) through 15% wire faults all succeed and read back identical."""
    name, url, options, proxy = chaos
    async with astore.open(url, transfer=CFG, retry=CHAOS_RETRY, **options) as store:
        proxy.set_rate(RATE)
        total, seconds = await run_workload(store, tmp_path, seed=2024, count=N_OBJECTS)
        proxy.set_rate(0)
        leftovers = [u async for u in store.list_uploads()]
        retries = store.stats["retries"]
        print(
            f"\nchaos {name}: {N_OBJECTS} objects, {total / MiB:.0f} MiB, {seconds:.1f} s, "
            f"{proxy.requests} requests, {proxy.total_injected} faults injected "
            f"{dict(proxy.injected)}, {retries} retries, {len(leftovers)} leftover uploads"
        )
        assert proxy.total_injected > 0.1 * proxy.requests
        assert retries > 0
        # Even uploads whose CreateMultipartUpload answer was lost are aborted.
        assert leftovers == [], f"{lost_creates(proxy)} create answers were cut"
        listed = [o.key async for o in store.list("obj/")]
        assert listed == [f"obj/{i:03d}" for i in range(N_OBJECTS)]


@pytest.mark.s3
async def test_lost_create_response_leaves_no_upload(s3_bucket: str, s3_proxy: ChaosProxy) -> None:
    """A CreateMultipartUpload answer cut on the wire leaves no upload behind."""
    s3_proxy.should_fault = lambda method, url: method == "POST" and "uploads" in url.query
    s3_proxy.set_rate(1.0, ["truncate"])
    options = {"endpoint_url": s3_proxy.url, "region": S3_REGION, **S3_CREDENTIALS}
    retry = astore.RetryPolicy(max_attempts=2, initial_backoff=0.001, max_backoff=0.01)
    async with astore.open(f"s3://{s3_bucket}", transfer=CFG, retry=retry, **options) as store:
        with pytest.raises(astore.NetworkError):
            await store.put("big", os.urandom(7 * MiB))
        s3_proxy.set_rate(0)
        assert s3_proxy.injected["truncate"] == 2
        assert [u.key async for u in store.list_uploads()] == []


async def seed_objects(store: astore.AsyncStore) -> dict[str, bytes]:
    objects = {f"c/{i}": os.urandom(size) for i, size in enumerate([1, 1000, 300_000, 7 * MiB])}
    for key, data in objects.items():
        await store.put(key, data)
    return objects


async def test_flipped_download_bits_raise_integrity_error(
    chaos: tuple[str, str, dict[str, Any], ChaosProxy], tmp_path: Path
) -> None:
    """Every read whose body had a bit flipped raises IntegrityError and leaves no file."""
    _, url, options, proxy = chaos
    async with astore.open(url, transfer=CFG, retry=CHAOS_RETRY, **options) as store:
        objects = await seed_objects(store)
        proxy.set_rate(0.4, ["corrupt"])
        caught = clean = 0
        for round_ in range(4):
            for key, data in objects.items():
                for how in ("get", "download", "iter_bytes"):
                    before = proxy.injected["corrupt"]
                    dest = tmp_path / f"{how}-{round_}-{key.replace('/', '_')}"
                    try:
                        if how == "get":
                            got = await store.get(key)
                        elif how == "download":
                            await store.download(key, dest)
                            got = dest.read_bytes()
                        else:
                            got = b"".join([c async for c in store.iter_bytes(key)])
                        error = None
                    except astore.IntegrityError as exc:
                        error = exc
                    if proxy.injected["corrupt"] > before:
                        assert error is not None, f"{how} {key}: a flipped bit went unnoticed"
                        assert not dest.exists()
                        caught += 1
                    else:
                        assert error is None, f"{how} {key}: {error}"
                        assert got == data
                        clean += 1
        assert caught > 0
        assert clean > 0
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.s3
@pytest.mark.parametrize(
    "size",
    [
        300_000,
        7 * MiB,
    ],
    ids=["single", "multipart"],
)
async def test_flipped_upload_bits_caught_on_next_read_s3(
    s3_bucket: str, s3_proxy: ChaosProxy, tmp_path: Path, size: int
) -> None:
    """A bit flipped on its way to moto (which does not verify) fails the upload or the read."""
    options = {"endpoint_url": s3_proxy.url, "region": S3_REGION, **S3_CREDENTIALS}
    async with astore.open(
        f"s3://{s3_bucket}", transfer=CFG, retry=CHAOS_RETRY, **options
    ) as store:
        s3_proxy.set_rate(1.0, ["corrupt_upload"])
        try:
            await store.put("k", os.urandom(size))
        except astore.IntegrityError:
            # Multipart: the completion reports a CRC32C other than the one sent.
            s3_proxy.set_rate(0)
            assert size > CFG.multipart_threshold
            assert not await store.exists("k")
            return
        s3_proxy.set_rate(0)
        assert s3_proxy.injected["corrupt_upload"] >= 1
        with pytest.raises(astore.IntegrityError):
            await store.get("k")
        with pytest.raises(astore.IntegrityError):
            await store.download("k", tmp_path / "k")
        assert list(tmp_path.iterdir()) == []


@pytest.mark.gcs
@pytest.mark.parametrize("size", [300_000, 7 * MiB], ids=["single", "multipart"])
async def test_flipped_upload_bits_never_read_back_gcs(
    fake_gcs_server: Emulator, gcs_proxy: ChaosProxy, size: int
) -> None:
    """A bit flipped on its way to GCS fails the upload, or else the next verified read."""
    bucket = fake_gcs_server.new_bucket()
    async with astore.open(
        f"gs://{bucket}", transfer=CFG, retry=CHAOS_RETRY, emulator_host=gcs_proxy.url
    ) as store:
        gcs_proxy.set_rate(1.0, ["corrupt_upload"])
        try:
            await store.put("k", os.urandom(size))
        except astore.IntegrityError:
            gcs_proxy.set_rate(0)
            assert not await store.exists("k")  # caught at upload: nothing left behind
            return
        gcs_proxy.set_rate(0)
        assert gcs_proxy.injected["corrupt_upload"] >= 1
        with pytest.raises(astore.IntegrityError):
            await store.get("k")
