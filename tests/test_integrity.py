"""Corruption is caught: every read is verified against the checksum recorded at upload."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import astore
from astore import MiB
from astore.backends import memory as memory_backend

pytestmark = pytest.mark.anyio


def corrupt_memory(name: str, key: str) -> None:
    container = memory_backend._REGISTRY[name]
    obj = container.objects[key]
    flipped = bytearray(obj.data)
    flipped[len(flipped) // 2] ^= 0x01
    container.objects[key] = obj.__class__(
        bytes(flipped), obj.etag, obj.modified, obj.checksums, obj.content_type
    )


def corrupt_file(path: Path) -> None:
    """Flip one bit in place, keeping size and mtime (as silent disk corruption would)."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(st.st_size // 2)
        byte = f.read(1)
        f.seek(st.st_size // 2)
        f.write(bytes([byte[0] ^ 0x01]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("size", [1000, 12 * MiB])
async def test_corrupted_memory_object_fails_get_and_download(size: int, tmp_path: Path) -> None:
    """A flipped bit makes get() and download() raise IntegrityError and leave no file."""
    cfg = astore.TransferConfig(part_size=5 * MiB, multipart_threshold=6 * MiB)
    async with astore.open("memory://integrity", transfer=cfg) as store:
        await store.put("k", os.urandom(size))
        corrupt_memory("integrity", "k")
        with pytest.raises(astore.IntegrityError):
            await store.get("k")
        with pytest.raises(astore.IntegrityError):
            await store.download("k", tmp_path / "out")
        assert list(tmp_path.iterdir()) == []
        with pytest.raises(astore.IntegrityError):
            async for _ in store.iter_bytes("k"):
                pass


async def test_corrupted_local_file_fails_download(tmp_path: Path) -> None:
    """Silent corruption of a local file is caught on download; the destination stays absent."""
    root = tmp_path / "store"
    cfg = astore.TransferConfig(part_size=5 * MiB, multipart_threshold=6 * MiB)
    async with astore.open(root, transfer=cfg) as store:
        await store.put("ckpt.bin", os.urandom(13 * MiB))
        corrupt_file(root / "ckpt.bin")
        with pytest.raises(astore.IntegrityError):
            await store.download("ckpt.bin", tmp_path / "restored.bin")
    assert not (tmp_path / "restored.bin").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["store"]


async def test_file_rewritten_outside_astore_is_read_unverified(tmp_path: Path) -> None:
    """A file replaced by another program has no recorded checksum and reads as it is now."""
    root = tmp_path / "store"
    async with astore.open(root) as store:
        await store.put("notes.txt", b"old")
        (root / "notes.txt").write_bytes(b"new content")
        assert await store.get("notes.txt") == b"new content"
        assert (await store.stat("notes.txt")).checksums == {}


async def test_checksum_off_skips_verification() -> None:
    """With checksum=None nothing is recorded and nothing is verified."""
    cfg = astore.TransferConfig(checksum=None)
    async with astore.open("memory://nochecksum", transfer=cfg) as store:
        await store.put("k", b"abc")
        assert (await store.stat("k")).checksums == {}
        corrupt_memory("nochecksum", "k")
        assert await store.get("k") != b"abc"


@pytest.mark.parametrize("algorithm", ["md5", "sha256"])
async def test_other_algorithms_are_recorded_and_verified(algorithm: str, tmp_path: Path) -> None:
    """MD5 and SHA-256 are recorded on upload (single and multipart) and verified on read."""
    cfg = astore.TransferConfig(part_size=5 * MiB, multipart_threshold=6 * MiB, checksum=algorithm)
    data = os.urandom(11 * MiB)
    async with astore.open(f"memory://alg-{algorithm}", transfer=cfg) as store:
        await store.put("big", data)
        await store.put("small", b"abc")
        assert set((await store.stat("big")).checksums) == {algorithm}
        await store.download("big", tmp_path / "big")
        assert (tmp_path / "big").read_bytes() == data
        corrupt_memory(f"alg-{algorithm}", "big")
        with pytest.raises(astore.IntegrityError):
            await store.download("big", tmp_path / "big2")
