"""Property tests: a key round-trips or raises InvalidKeyError; nothing escapes the root."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import astore
from astore._keys import check_key

# Keys built from the characters that matter: separators, dots, NUL, backslashes, unicode.
segment = st.text(
    alphabet=st.sampled_from(["a", "é", "😀", ".", "/", "\\", "\x00", " ", "-", "~", "\n"]),
    min_size=0,
    max_size=12,
)
keys = st.one_of(
    segment,
    st.lists(st.sampled_from(["a", "..", ".", "", "b", "/", "%2e", "\x00", "é"]), max_size=6).map(
        "/".join
    ),
    st.text(max_size=40),
)


def snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(key=keys)
def test_keys_round_trip_or_are_refused_locally(
    tmp_path_factory: pytest.TempPathFactory, key: str
) -> None:
    """On a local store a key round-trips, or raises InvalidKeyError and writes nothing."""
    base = tmp_path_factory.mktemp("prop")
    root = base / "root"
    outside_before = snapshot(base)

    async def run() -> None:
        async with astore.open(root, fsync=False) as store:
            try:
                check_key(key)
            except astore.InvalidKeyError:
                with pytest.raises(astore.InvalidKeyError):
                    await store.put(key, b"data")
                return
            await store.put(key, b"data")
            assert await store.get(key) == b"data"
            assert [o.key async for o in store.list()] == [key]
            # The file lies at its natural path, inside the root.
            path = root.joinpath(*key.split("/"))
            assert path.read_bytes() == b"data"
            assert os.path.realpath(path).startswith(str(root.resolve()) + os.sep)

    anyio.run(run)
    outside_after = {p for p in snapshot(base) if not p.startswith("root")}
    assert outside_after == {p for p in outside_before if not p.startswith("root")}


@settings(max_examples=200, deadline=None)
@given(key=keys)
def test_keys_round_trip_or_are_refused_in_memory(key: str) -> None:
    """On a memory store a key round-trips, or raises InvalidKeyError."""

    async def run() -> None:
        async with astore.open("memory://prop-keys") as store:
            try:
                await store.put(key, b"v")
            except astore.InvalidKeyError:
                return
            assert await store.get(key) == b"v"
            await store.delete(key)

    anyio.run(run)


@settings(max_examples=200, deadline=None)
@given(start=st.integers(-5, 40), end=st.one_of(st.none(), st.integers(-5, 40)))
def test_ranges_read_a_slice_or_raise_invalid_range(start: int, end: int | None) -> None:
    """Any (start, end) reads exactly the slice, or raises InvalidRangeError."""
    data = bytes(range(30))

    async def run() -> None:
        async with astore.open("memory://prop-ranges") as store:
            await store.put("r", data)
            valid = start >= 0 and (end is None or start <= end <= len(data)) and start <= len(data)
            if end is None:
                valid = valid and start <= len(data)
            rng = (start, end if end is not None else len(data))
            if valid:
                assert await store.get("r", range=rng) == data[rng[0] : rng[1]]
            else:
                with pytest.raises(astore.InvalidRangeError):
                    await store.get("r", range=rng)

    anyio.run(run)


def test_symlink_out_of_root_is_refused(tmp_path: Path) -> None:
    """A key that walks through a symlink pointing outside the root raises InvalidKeyError."""
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    root.mkdir()
    (root / "link").symlink_to(outside)

    async def run() -> None:
        async with astore.open(root) as store:
            with pytest.raises(astore.InvalidKeyError):
                await store.get("link/secret")
            with pytest.raises(astore.InvalidKeyError):
                await store.put("link/new", b"x")
            assert [o.key async for o in store.list()] == []
            assert [o.key async for o in store.list("link/")] == []

    anyio.run(run)
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
