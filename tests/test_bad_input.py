"""Bad input raises only documented errors, and never writes outside a local store's root.

Documented errors: :class:`astore.AstoreError` subclasses, ``TypeError`` and ``ValueError``.
Anything else (AttributeError, KeyError, OSError, ...) is a bug.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import astore

DOCUMENTED = (astore.AstoreError, TypeError, ValueError)
SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.lists(st.integers(), max_size=3),
    st.tuples(st.integers(), st.integers()),
)
url_text = st.one_of(
    st.text(max_size=60),
    st.builds(
        lambda scheme, rest: f"{scheme}://{rest}",
        st.sampled_from(["s3", "gs", "memory", "file", "S3", "http", "", "ftp"]),
        st.text(max_size=40),
    ),
)


def snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@SETTINGS
@given(url=url_text)
def test_random_urls_raise_only_documented_errors(url: str, tmp_path: Path) -> None:
    """astore.open() on any string either builds a store or raises a documented error."""
    cwd = os.getcwd()
    os.chdir(tmp_path)  # relative paths become local stores here, never in the repo
    try:
        with contextlib.suppress(*DOCUMENTED):
            astore.open(url)
    finally:
        os.chdir(cwd)


@SETTINGS
@given(
    value=anything,
    name=st.sampled_from(
        [
            "part_size",
            "multipart_threshold",
            "max_concurrency",
            "max_buffer_bytes",
            "checksum",
            "chunk_size",
        ]
    ),
)
def test_transfer_config_values_raise_only_documented_errors(value: Any, name: str) -> None:
    """TransferConfig accepts a value or raises a documented error."""
    with contextlib.suppress(*DOCUMENTED):
        astore.TransferConfig(**{name: value})


@SETTINGS
@given(
    value=anything,
    name=st.sampled_from(["max_attempts", "initial_backoff", "max_backoff", "deadline", "jitter"]),
)
def test_retry_policy_values_raise_only_documented_errors(value: Any, name: str) -> None:
    """RetryPolicy accepts a value or raises a documented error."""
    try:
        policy = astore.RetryPolicy(**{name: value})
    except DOCUMENTED:
        return
    with contextlib.suppress(*DOCUMENTED):
        policy.backoff(3)


def run_in_store(root: Path, fn: Any) -> None:
    async def main() -> None:
        async with astore.open(root, fsync=False) as store:
            await fn(store)

    anyio.run(main)


@SETTINGS
@given(range_=anything | st.tuples(anything, anything))
def test_ranges_raise_only_documented_errors(range_: Any, tmp_path: Path) -> None:
    """get(range=...) with any value returns bytes or raises a documented error."""

    async def read(store: astore.AsyncStore) -> None:
        await store.put("obj", b"0123456789")
        try:
            data = await store.get("obj", range=range_)
        except DOCUMENTED:
            return
        start, end = range_ if range_ is not None else (0, None)
        assert data == b"0123456789"[start:end]

    run_in_store(tmp_path / "store", read)


@SETTINGS
@given(start=anything, end=anything)
def test_iter_bytes_bounds_raise_only_documented_errors(
    start: Any, end: Any, tmp_path: Path
) -> None:
    """iter_bytes(start=, end=) with any values streams or raises a documented error."""

    async def read(store: astore.AsyncStore) -> None:
        await store.put("obj", b"0123456789")
        with contextlib.suppress(*DOCUMENTED):
            [c async for c in store.iter_bytes("obj", start=start, end=end)]

    run_in_store(tmp_path / "store", read)


@SETTINGS
@given(key=st.text(max_size=40) | anything, data=anything)
def test_put_arguments_raise_only_documented_errors(key: Any, data: Any, tmp_path: Path) -> None:
    """put(key, data) with any values stores under the root or raises a documented error."""
    base = tmp_path / "base"
    root = base / "store"
    root.mkdir(parents=True, exist_ok=True)
    before = snapshot(base)

    async def write(store: astore.AsyncStore) -> None:
        with contextlib.suppress(*DOCUMENTED):
            await store.put(key, data)

    run_in_store(root, write)
    outside = {p for p in snapshot(base) - before if not p.startswith("store")}
    assert outside == set(), f"written outside the root: {outside}"


@SETTINGS
@given(key=st.text(max_size=40) | anything, source=anything | st.just(iter([b"x"])))
def test_upload_arguments_raise_only_documented_errors(
    key: Any, source: Any, tmp_path: Path
) -> None:
    """upload(source, key) with any values stores under the root or raises a documented error."""
    base = tmp_path / "base"
    root = base / "store"
    root.mkdir(parents=True, exist_ok=True)
    before = snapshot(base)

    async def write(store: astore.AsyncStore) -> None:
        try:
            await store.upload(source, key)
        except FileNotFoundError:
            assert isinstance(source, str)  # documented for a path that does not exist
        except DOCUMENTED:
            pass

    cwd = os.getcwd()
    os.chdir(base)  # a str source is a path: resolve it in the sandbox
    try:
        run_in_store(root, write)
    finally:
        os.chdir(cwd)
    outside = {p for p in snapshot(base) - before if not p.startswith("store")}
    assert outside == set(), f"written outside the root: {outside}"


@pytest.mark.parametrize(
    "key", ["../escape", "/abs", "a/../../b", "a\x00b", "", ".", "a/./b", "a//b"]
)
def test_escaping_keys_write_nothing_outside_the_root(key: str, tmp_path: Path) -> None:
    """Keys that try to leave the root raise InvalidKeyError and write nothing anywhere."""
    root = tmp_path / "store"
    root.mkdir()
    before = snapshot(tmp_path)

    async def write(store: astore.AsyncStore) -> None:
        with pytest.raises(astore.InvalidKeyError):
            await store.put(key, b"x")

    run_in_store(root, write)
    assert {p for p in snapshot(tmp_path) - before if not p.startswith("store")} == set()
