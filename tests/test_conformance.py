"""One conformance suite: the behaviour every backend shares, run on memory, local, S3 and GCS."""

from __future__ import annotations

import io
import os
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

import astore
from astore import MiB

pytestmark = pytest.mark.anyio

PART = 5 * MiB  # the conformance store's part size (see conftest)


def blob(size: int, seed: int = 0) -> bytes:
    """Deterministic, incompressible-enough test data."""
    block = os.urandom(min(size, 64 * 1024)) if size else b""
    return (block * (size // max(len(block), 1) + 1))[:size] if size else b""


async def chunks_of(data: bytes, step: int = 777_777) -> AsyncIterator[bytes]:
    for i in range(0, len(data), step):
        yield data[i : i + step]


# -- put / get / stat ---------------------------------------------------------------------


async def test_put_get_round_trip(store: astore.AsyncStore) -> None:
    """Bytes put under a key come back identical."""
    await store.put("a.bin", b"hello world")
    assert await store.get("a.bin") == b"hello world"


async def test_put_accepts_bytearray_and_memoryview(store: astore.AsyncStore) -> None:
    """put() takes any bytes-like buffer."""
    await store.put("ba", bytearray(b"abc"))
    await store.put("mv", memoryview(b"xyzw")[1:])
    assert await store.get("ba") == b"abc"
    assert await store.get("mv") == b"yzw"


async def test_put_rejects_str(store: astore.AsyncStore) -> None:
    """put() refuses text with a TypeError instead of guessing an encoding."""
    with pytest.raises(TypeError):
        await store.put("t", "text")  # type: ignore[arg-type]


async def test_stat_reports_size_etag_and_checksum(store: astore.AsyncStore) -> None:
    """stat() returns the size, an etag and the CRC32C recorded at upload."""
    data = b"x" * 1000
    put_info = await store.put("s.bin", data)
    info = await store.stat("s.bin")
    assert info.key == "s.bin"
    assert info.size == 1000
    assert info.etag
    assert info.etag == put_info.etag
    assert info.checksums.get("crc32c") == astore._checksum.hash_bytes("crc32c", data)
    assert info.last_modified is not None


async def test_empty_object(store: astore.AsyncStore, tmp_path: Path) -> None:
    """A zero-byte object can be put, stated, read, streamed and downloaded."""
    await store.put("empty", b"")
    assert (await store.stat("empty")).size == 0
    assert await store.get("empty") == b""
    assert [c async for c in store.iter_bytes("empty")] == []
    await store.download("empty", tmp_path / "empty")
    assert (tmp_path / "empty").read_bytes() == b""


async def test_overwrite_replaces_object(store: astore.AsyncStore) -> None:
    """A second put replaces the object and changes its etag."""
    first = await store.put("o", b"one")
    second = await store.put("o", b"two!")
    assert await store.get("o") == b"two!"
    assert first.etag != second.etag


async def test_get_missing_raises_not_found(store: astore.AsyncStore) -> None:
    """Reading a missing key raises NotFoundError, a FileNotFoundError naming store and key."""
    with pytest.raises(astore.NotFoundError) as info:
        await store.get("nope/missing.bin")
    assert isinstance(info.value, FileNotFoundError)
    assert "missing.bin" in str(info.value)
    assert store.url.split("://")[0] in str(info.value)


async def test_stat_missing_raises_not_found(store: astore.AsyncStore) -> None:
    """stat() of a missing key raises NotFoundError."""
    with pytest.raises(astore.NotFoundError):
        await store.stat("missing")


async def test_exists(store: astore.AsyncStore) -> None:
    """exists() is True for a stored key and False otherwise."""
    await store.put("here", b"1")
    assert await store.exists("here")
    assert not await store.exists("there")


async def test_unicode_and_deep_keys(store: astore.AsyncStore) -> None:
    """Unicode and deeply nested keys round-trip and list back unchanged."""
    keys = ["données/été/😀.txt", "a/" * 30 + "leaf", "spaces in key/and+plus=eq"]
    for i, key in enumerate(keys):
        await store.put(key, str(i).encode())
    for i, key in enumerate(keys):
        assert await store.get(key) == str(i).encode()
    assert sorted([o.key async for o in store.list()]) == sorted(keys)


@pytest.mark.parametrize(
    "key",
    ["", "/abs", "a/../b", "..", "./a", "a//b", "a/", "nul\x00byte", "back\\slash", ".astore/x"],
)
async def test_invalid_keys_raise_before_io(store: astore.AsyncStore, key: str) -> None:
    """Invalid keys raise InvalidKeyError (a ValueError) and nothing is written."""
    with pytest.raises(astore.InvalidKeyError) as info:
        await store.put(key, b"x")
    assert isinstance(info.value, ValueError)
    assert [o async for o in store.list()] == []


# -- ranges -------------------------------------------------------------------------------


async def test_ranges(store: astore.AsyncStore) -> None:
    """First byte, last byte, a middle slice and an empty range read what slicing would."""
    data = bytes(range(256)) * 4
    await store.put("r", data)
    assert await store.get("r", range=(0, 1)) == data[:1]
    assert await store.get("r", range=(1023, 1024)) == data[-1:]
    assert await store.get("r", range=(100, 200)) == data[100:200]
    assert await store.get("r", range=(5, 5)) == b""


@pytest.mark.parametrize("bad", [(0, 2000), (1025, 1030), (10, 5), (-1, 4)])
async def test_bad_range_raises(store: astore.AsyncStore, bad: tuple[int, int]) -> None:
    """A range past the end or reversed raises InvalidRangeError."""
    await store.put("r", b"z" * 1024)
    with pytest.raises(astore.InvalidRangeError):
        await store.get("r", range=bad)


async def test_iter_bytes_streams_ranges(store: astore.AsyncStore) -> None:
    """iter_bytes() yields chunks of the asked size that join to the asked range."""
    data = blob(300_000)
    await store.put("it", data)
    chunks = [c async for c in store.iter_bytes("it", chunk_size=64 * 1024)]
    assert b"".join(chunks) == data
    assert max(len(c) for c in chunks) <= 64 * 1024
    part = b"".join([c async for c in store.iter_bytes("it", start=1000, end=2000)])
    assert part == data[1000:2000]


# -- conditional create ---------------------------------------------------------------------


async def test_if_not_exists_refuses_existing(store: astore.AsyncStore) -> None:
    """A conditional create of an existing key raises AlreadyExistsError and keeps the object."""
    await store.put("c", b"first", if_not_exists=True)
    with pytest.raises(astore.AlreadyExistsError) as info:
        await store.put("c", b"second", if_not_exists=True)
    assert isinstance(info.value, FileExistsError)
    assert await store.get("c") == b"first"


async def test_concurrent_creators_exactly_one_wins(store: astore.AsyncStore) -> None:
    """Eight concurrent conditional creators: exactly one succeeds."""
    results: list[bool] = []

    async def create(i: int) -> None:
        try:
            await store.put("race", str(i).encode(), if_not_exists=True)
            results.append(True)
        except astore.AlreadyExistsError:
            results.append(False)

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(create, i)
    assert results.count(True) == 1
    assert len(results) == 8


async def test_multipart_if_not_exists_refuses_existing(store: astore.AsyncStore) -> None:
    """A conditional multipart upload onto an existing key fails and leaves no upload behind."""
    await store.put("mp", b"old")
    with pytest.raises(astore.AlreadyExistsError):
        await store.upload(chunks_of(blob(12 * MiB)), "mp", if_not_exists=True)
    assert await store.get("mp") == b"old"
    assert [u async for u in store.backend.list_uploads("")] == []


# -- uploads ------------------------------------------------------------------------------


async def test_upload_from_path(store: astore.AsyncStore, tmp_path: Path) -> None:
    """upload() of a small file stores its bytes."""
    path = tmp_path / "f.bin"
    path.write_bytes(b"file-bytes")
    info = await store.upload(path, "f.bin")
    assert info.size == 10
    assert await store.get("f.bin") == b"file-bytes"


async def test_upload_from_file_object_keeps_it_open(store: astore.AsyncStore) -> None:
    """upload() reads a binary file object from its position and does not close it."""
    f = io.BytesIO(b"0123456789")
    f.seek(3)
    await store.upload(f, "fo")
    assert not f.closed
    assert await store.get("fo") == b"3456789"


async def test_upload_rejects_text_file(store: astore.AsyncStore) -> None:
    """upload() refuses a text-mode file object."""
    with pytest.raises(TypeError):
        await store.upload(io.StringIO("text"), "t")


async def test_multipart_from_path(store: astore.AsyncStore, tmp_path: Path) -> None:
    """A file over the threshold goes multipart and reads back identical and verified."""
    data = blob(13 * MiB + 12345)
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    info = await store.upload(path, "big.bin")
    assert info.size == len(data)
    assert await store.get("big.bin") == data
    assert (await store.stat("big.bin")).checksums.get("crc32c") == astore._checksum.hash_bytes(
        "crc32c", data
    )


async def test_multipart_from_async_iterator(store: astore.AsyncStore) -> None:
    """An async iterator of odd-sized chunks uploads as multipart, byte-identical."""
    data = blob(16 * MiB + 1)
    await store.upload(chunks_of(data), "iter.bin")
    assert await store.get("iter.bin") == data


async def test_multipart_put_of_large_bytes(store: astore.AsyncStore) -> None:
    """put() of a buffer over the threshold goes multipart and reads back identical."""
    data = blob(11 * MiB)
    await store.put("bigput", data)
    assert await store.get("bigput") == data
    assert [u async for u in store.backend.list_uploads("")] == []


async def test_small_async_iterator_is_one_request(store: astore.AsyncStore) -> None:
    """A short async iterator (less than a part) is stored in one request, not multipart."""
    await store.upload(chunks_of(b"tiny" * 10, step=7), "tiny")
    assert await store.get("tiny") == b"tiny" * 10


async def test_upload_peak_memory_is_bounded(store: astore.AsyncStore, backend_name: str) -> None:
    """A 40 MiB streamed upload buffers at most part_size * max_concurrency plus slack."""
    if backend_name == "memory":
        pytest.skip("the memory backend holds the object itself in this process")
    cfg = store.transfer
    bound = cfg.part_size * cfg.max_concurrency

    async def source() -> AsyncIterator[bytes]:
        for _ in range(40):
            yield os.urandom(MiB)

    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        await store.upload(source(), "mem.bin")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (await store.stat("mem.bin")).size == 40 * MiB
    assert peak < bound + 8 * MiB, f"peak {peak / MiB:.1f} MiB over {bound / MiB:.0f} MiB"


async def test_progress_reports_total(store: astore.AsyncStore) -> None:
    """The progress callback ends with (total, total) and never decreases."""
    seen: list[tuple[int, int | None]] = []
    data = blob(12 * MiB)
    await store.upload(chunks_of(data), "p", progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (len(data), len(data))
    dones = [d for d, _ in seen]
    assert dones == sorted(dones)


# -- downloads ----------------------------------------------------------------------------


async def test_download_large_is_verified_and_atomic(
    store: astore.AsyncStore, tmp_path: Path
) -> None:
    """A multipart object downloads (ranged, in parallel) byte-identical, leaving no temp file."""
    data = blob(17 * MiB + 3)
    await store.put("dl.bin", data)
    dest = tmp_path / "out" / "dl.bin"
    info = await store.download("dl.bin", dest)
    assert info.size == len(data)
    assert dest.read_bytes() == data
    assert sorted(p.name for p in dest.parent.iterdir()) == ["dl.bin"]


async def test_download_missing_leaves_nothing(store: astore.AsyncStore, tmp_path: Path) -> None:
    """Downloading a missing key raises NotFoundError and creates no file."""
    dest = tmp_path / "downloads"
    dest.mkdir()
    with pytest.raises(astore.NotFoundError):
        await store.download("missing", dest / "x")
    assert list(dest.iterdir()) == []


async def test_download_keeps_existing_file_on_error(
    store: astore.AsyncStore, tmp_path: Path
) -> None:
    """A failed download leaves an existing destination file untouched."""
    dest = tmp_path / "keep"
    dest.write_bytes(b"precious")
    with pytest.raises(astore.NotFoundError):
        await store.download("missing", dest)
    assert dest.read_bytes() == b"precious"


# -- listing ------------------------------------------------------------------------------


@pytest.mark.slow
async def test_pagination_over_2500_keys(store: astore.AsyncStore) -> None:
    """Listing 2,500 keys with 100-key pages yields each key once, in order."""
    keys = [f"k/{i:05d}" for i in range(2500)]
    limiter = anyio.CapacityLimiter(32)

    async def put(key: str) -> None:
        async with limiter:
            await store.put(key, b"")

    async with anyio.create_task_group() as tg:
        for key in keys:
            tg.start_soon(put, key)
    listed = [o.key async for o in store.list("k/", page_size=100)]
    assert listed == keys


async def test_list_is_sorted_and_prefixed(store: astore.AsyncStore) -> None:
    """list(prefix) yields only keys under the prefix, lexicographically sorted."""
    for key in ["b/2", "a/1", "a/0", "a.txt", "ab", "c"]:
        await store.put(key, b"-")
    assert [o.key async for o in store.list()] == ["a.txt", "a/0", "a/1", "ab", "b/2", "c"]
    assert [o.key async for o in store.list("a/")] == ["a/0", "a/1"]
    assert [o.key async for o in store.list("a")] == ["a.txt", "a/0", "a/1", "ab"]


async def test_list_with_delimiter(store: astore.AsyncStore) -> None:
    """With a delimiter, sub-folders roll up into common prefixes among the objects."""
    for key in ["top.txt", "dir/a", "dir/b", "dir/sub/c", "zed/x"]:
        await store.put(key, b"1")
    top = [(o.key, o.is_prefix) async for o in store.list(delimiter="/")]
    assert top == [("dir/", True), ("top.txt", False), ("zed/", True)]
    inner = [(o.key, o.is_prefix) async for o in store.list("dir/", delimiter="/")]
    assert inner == [("dir/a", False), ("dir/b", False), ("dir/sub/", True)]


async def test_list_entries_carry_sizes(store: astore.AsyncStore) -> None:
    """Listed objects report their size."""
    await store.put("sz", b"12345")
    [info] = [o async for o in store.list()]
    assert info.size == 5


async def test_list_empty_store(store: astore.AsyncStore) -> None:
    """Listing an empty store or an unused prefix yields nothing."""
    assert [o async for o in store.list()] == []
    assert [o async for o in store.list("nothing/", delimiter="/")] == []


# -- delete / copy ------------------------------------------------------------------------


async def test_delete(store: astore.AsyncStore) -> None:
    """delete() removes the object; deleting it again is not an error."""
    await store.put("d/x", b"1")
    await store.delete("d/x")
    assert not await store.exists("d/x")
    await store.delete("d/x")
    assert [o async for o in store.list()] == []


@pytest.mark.slow
async def test_delete_many_over_one_batch(store: astore.AsyncStore) -> None:
    """delete_many() removes more keys than one batch holds."""
    keys = [f"m/{i:04d}" for i in range(1200)]
    limiter = anyio.CapacityLimiter(32)

    async def put(key: str) -> None:
        async with limiter:
            await store.put(key, b"")

    async with anyio.create_task_group() as tg:
        for key in keys:
            tg.start_soon(put, key)
    await store.put("keep", b"1")
    await store.delete_many(keys)
    assert [o.key async for o in store.list()] == ["keep"]


async def test_delete_many_validates_all_first(store: astore.AsyncStore) -> None:
    """One invalid key stops delete_many() before anything is deleted."""
    await store.put("stay", b"1")
    with pytest.raises(astore.InvalidKeyError):
        await store.delete_many(["stay", "../escape"])
    assert await store.exists("stay")


async def test_copy_preserves_bytes_and_checksum(store: astore.AsyncStore) -> None:
    """copy() duplicates the object server-side, checksum included."""
    data = blob(100_000)
    await store.put("src", data)
    info = await store.copy("src", "dst/copy")
    assert info.key == "dst/copy"
    assert await store.get("dst/copy") == data
    assert (await store.stat("dst/copy")).checksums.get("crc32c") == (
        await store.stat("src")
    ).checksums.get("crc32c")


async def test_copy_missing_raises(store: astore.AsyncStore) -> None:
    """Copying a missing key raises NotFoundError."""
    with pytest.raises(astore.NotFoundError):
        await store.copy("nothing", "dst")


async def test_copy_if_not_exists(
    store: astore.AsyncStore, backend_name: str, request: pytest.FixtureRequest
) -> None:
    """A conditional copy onto an existing key raises AlreadyExistsError."""
    if backend_name == "gcs":
        # Both GCS emulators ignore ifGenerationMatch on rewrite; the backend sends it.
        request.applymarker(
            pytest.mark.xfail(reason="emulators ignore ifGenerationMatch=0 on rewrite", strict=True)
        )
    await store.put("a", b"a")
    await store.put("b", b"b")
    with pytest.raises(astore.AlreadyExistsError):
        await store.copy("a", "b", if_not_exists=True)
    assert await store.get("b") == b"b"


# -- store lifecycle ----------------------------------------------------------------------


async def test_url_for(store: astore.AsyncStore) -> None:
    """url_for() joins the store URL and the key."""
    assert store.url_for("a/b") == f"{store.url}/a/b"


async def test_closed_store_refuses_calls(store_args: tuple[str, dict[str, object]]) -> None:
    """A store used after its block, or before it, raises ClosedError."""
    url, options = store_args
    s = astore.open(url, **options)  # type: ignore[arg-type]
    with pytest.raises(astore.ClosedError):
        await s.get("x")
    async with s:
        pass
    with pytest.raises(astore.ClosedError):
        await s.put("x", b"1")
