"""Fault injection with FaultyBackend: astore survives transient faults and loses nothing."""

from __future__ import annotations

import io
import os
import random
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

import astore
from astore import MiB
from astore.backends.local import LocalBackend
from astore.backends.memory import MemoryBackend
from astore.testing import FaultyBackend, SimulatedCrash

pytestmark = pytest.mark.anyio

RETRY = astore.RetryPolicy(max_attempts=10, initial_backoff=0.0005, max_backoff=0.005, deadline=120)
CFG = astore.TransferConfig(part_size=5 * MiB, multipart_threshold=6 * MiB, max_concurrency=4)


def inner_backend(kind: str, tmp_path: Path, name: str) -> astore._backend.Backend:
    if kind == "memory":
        return MemoryBackend(name)
    return LocalBackend(str(tmp_path / name), fsync=False)


async def chunks_of(data: bytes, step: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), step):
        yield data[i : i + step]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["memory", "local"])
async def test_200_uploads_survive_15_percent_faults(kind: str, tmp_path: Path) -> None:
    """200 uploads (0 B-30 MiB, bytes/files/iterators) through 15% faults all read back intact."""
    rng = random.Random(2024)
    faulty = FaultyBackend(inner_backend(kind, tmp_path, "faults"), rate=0.15, seed=7)
    store = astore.AsyncStore(faulty, transfer=CFG, retry=RETRY)
    block = os.urandom(MiB)
    plan = []
    for i in range(200):
        # Mostly small objects, a fifth of them multipart-sized.
        size = rng.randint(6 * MiB, 30 * MiB) if rng.random() < 0.2 else rng.randint(0, 300_000)
        plan.append((f"obj/{i:03d}", size, rng.choice(["bytes", "file", "iter"])))

    def payload(key: str, size: int) -> bytes:
        head = key.encode().ljust(16, b"-")
        return (head + block * (size // MiB + 1))[:size]

    limiter = anyio.CapacityLimiter(8)

    async def one(key: str, size: int, how: str) -> None:
        data = payload(key, size)
        async with limiter:
            if how == "bytes":
                await store.put(key, data)
            elif how == "file":
                path = tmp_path / f"src-{key.replace('/', '_')}"
                path.write_bytes(data)
                await store.upload(path, key)
            else:
                await store.upload(chunks_of(data, 1_000_003), key)

    async with store:
        async with anyio.create_task_group() as tg:
            for key, size, how in plan:
                tg.start_soon(one, key, size, how)
        for key, size, _ in plan:
            assert await store.get(key) == payload(key, size), key
        assert [u async for u in faulty.inner.list_uploads("")] == []
        listed = [o.key async for o in store.list("obj/")]
    assert listed == sorted(k for k, _, _ in plan)
    assert sum(faulty.injected.values()) > 100
    assert store.stats["retries"] > 50
    print(f"\n{kind}: injected {dict(faulty.injected)}, retries {store.stats['retries']}")


async def test_lost_response_on_conditional_create_is_recognised() -> None:
    """A conditional create whose response is lost succeeds on retry instead of 'exists'."""
    faulty = FaultyBackend(MemoryBackend("lost-create"), script={"put_object": ["lost_response"]})
    async with astore.AsyncStore(faulty, retry=RETRY) as store:
        info = await store.put("k", b"mine", if_not_exists=True)
        assert info.size == 4
        assert faulty.injected["lost_response"] == 1
        with pytest.raises(astore.AlreadyExistsError):
            await store.put("k", b"other", if_not_exists=True)


async def test_lost_response_on_complete_is_recognised() -> None:
    """A multipart completion whose response is lost is confirmed by the object's checksum."""
    faulty = FaultyBackend(
        MemoryBackend("lost-complete"), script={"complete_upload": ["lost_response"]}
    )
    data = os.urandom(12 * MiB)
    async with astore.AsyncStore(faulty, transfer=CFG, retry=RETRY) as store:
        await store.put("big", data, if_not_exists=True)
        assert await store.get("big") == data


async def test_permanent_part_failure_aborts_the_upload() -> None:
    """When a part keeps failing, the error surfaces and no multipart upload is left."""
    faulty = FaultyBackend(
        MemoryBackend("perm-fail"), script={"upload_part": [None] + ["error"] * 10}
    )
    policy = astore.RetryPolicy(max_attempts=3, initial_backoff=0.0001, max_backoff=0.0001)
    async with astore.AsyncStore(faulty, transfer=CFG, retry=policy) as store:
        with pytest.raises(astore.ServerError) as info:
            await store.upload(io.BytesIO(os.urandom(16 * MiB)), "doomed")
        assert any("aborted" in note for note in info.value.__notes__)
        assert not await store.exists("doomed")
        assert [u async for u in faulty.inner.list_uploads("")] == []


async def test_cancelled_upload_aborts(tmp_path: Path) -> None:
    """Cancelling an upload mid-way aborts its multipart upload and stores nothing."""
    faulty = FaultyBackend(MemoryBackend("cancel"))
    started = anyio.Event()

    async def slow_source() -> AsyncIterator[bytes]:
        for _ in range(40):
            yield os.urandom(MiB)
            started.set()
            await anyio.sleep(0.01)

    async with astore.AsyncStore(faulty, transfer=CFG, retry=RETRY) as store:
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.upload, slow_source(), "cancelled")
            await started.wait()
            await anyio.sleep(0.15)
            tg.cancel_scope.cancel()
        assert not await store.exists("cancelled")
        assert [u async for u in faulty.inner.list_uploads("")] == []


async def test_crash_after_n_bytes_leaves_nothing(tmp_path: Path) -> None:
    """A simulated crash part-way through leaves no object and no upload behind."""
    faulty = FaultyBackend(LocalBackend(str(tmp_path / "s")), crash_after_bytes=12 * MiB)
    async with astore.AsyncStore(faulty, transfer=CFG, retry=RETRY) as store:
        with pytest.raises(SimulatedCrash):
            await store.put("ckpt", os.urandom(20 * MiB))
        assert not await store.exists("ckpt")
        assert [u async for u in faulty.inner.list_uploads("")] == []
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [".astore"]


@pytest.mark.parametrize("fault", ["reset", "truncate"])
async def test_broken_read_bodies_resume(fault: str, tmp_path: Path) -> None:
    """A body reset or cut short mid-way is resumed from the last byte, byte-identical."""
    data = os.urandom(3 * MiB)
    faulty = FaultyBackend(MemoryBackend(f"resume-{fault}"), script={"get_range": [fault, fault]})
    async with astore.AsyncStore(faulty, retry=RETRY) as store:
        await store.put("k", data)
        assert await store.get("k") == data
        assert faulty.injected[fault] == 2
        assert store.stats["retries"] >= 2


async def test_corrupted_read_body_raises_integrity_error(tmp_path: Path) -> None:
    """A bit flipped in a download body raises IntegrityError and leaves no file."""
    data = os.urandom(13 * MiB)
    faulty = FaultyBackend(MemoryBackend("corrupt-read"), script={"get_range": [None, "corrupt"]})
    async with astore.AsyncStore(faulty, transfer=CFG, retry=RETRY) as store:
        await store.put("k", data)
        with pytest.raises(astore.IntegrityError):
            await store.download("k", tmp_path / "out.bin")
    assert list(tmp_path.iterdir()) == []


async def test_throttling_honours_retry_after() -> None:
    """A throttled call waits at least retry_after before its retry."""
    faulty = FaultyBackend(
        MemoryBackend("throttle"), script={"head": ["throttle"]}, retry_after=0.2
    )
    async with astore.AsyncStore(faulty, retry=RETRY) as store:
        await store.put("k", b"1")
        t0 = anyio.current_time()
        await store.stat("k")
        assert anyio.current_time() - t0 >= 0.2 * 0.9


async def test_lost_create_response_leaves_no_orphan_upload() -> None:
    """When the reply to starting a multipart upload is lost, the orphaned upload is aborted."""
    faulty = FaultyBackend(
        MemoryBackend("lost-create-upload"), script={"create_upload": ["lost_response"]}
    )
    data = os.urandom(12 * MiB)
    async with astore.AsyncStore(faulty, transfer=CFG, retry=RETRY) as store:
        await store.put("big", data)
        assert faulty.injected["lost_response"] == 1
        assert await store.get("big") == data
        assert [u async for u in faulty.inner.list_uploads("")] == []
