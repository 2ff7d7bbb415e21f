"""Unit tests of the pure parts: checksums, retry policy, budget, URLs, config, public API."""

from __future__ import annotations

import os
import random

import anyio
import crc32c
import pytest

import astore
from astore._checksum import ObjectDigest, crc32c_combine, decode_crc32c, encode_crc32c
from astore._limits import ByteBudget
from astore._retry import retry_call
from astore._url import parse_url


def test_all_is_sorted_and_complete() -> None:
    """astore.__all__ is sorted and every name in it exists."""
    assert astore.__all__ == sorted(astore.__all__)
    for name in astore.__all__:
        assert hasattr(astore, name), name


def test_errors_subclass_the_builtins_they_mean() -> None:
    """Errors are catchable as the built-in exceptions they mean."""
    assert issubclass(astore.NotFoundError, FileNotFoundError)
    assert issubclass(astore.AlreadyExistsError, FileExistsError)
    assert issubclass(astore.PermissionDeniedError, PermissionError)
    assert issubclass(astore.InvalidKeyError, ValueError)
    assert issubclass(astore.ConfigurationError, ValueError)
    assert issubclass(astore.RequestTimeoutError, TimeoutError)
    assert issubclass(astore.NetworkError, ConnectionError)
    assert issubclass(astore.ThrottledError, astore.TransientError)


def test_object_error_names_store_key_and_operation() -> None:
    """An ObjectError's message names the operation, the store and the key."""
    err = astore.NotFoundError("no such object", key="a/b", store="s3://bkt", operation="get")
    assert str(err) == "get s3://bkt/a/b: no such object"


def test_object_errors_pickle() -> None:
    """Errors survive pickling (they cross process boundaries in worker pools)."""
    import pickle

    err = astore.ThrottledError("slow down", retry_after=2.0, key="k", store="s3://b")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is astore.ThrottledError
    assert back.retry_after == 2.0
    assert str(back) == str(err)


@pytest.mark.parametrize("split", [0, 1, 4095, 4096, 100_000])
def test_crc32c_combine_matches_concatenation(split: int) -> None:
    """Combining the CRCs of two pieces equals the CRC of their concatenation."""
    data = os.urandom(100_000)
    a, b = data[:split], data[split:]
    assert crc32c_combine(crc32c.crc32c(a), crc32c.crc32c(b), len(b)) == crc32c.crc32c(data)


def test_object_digest_parts_equal_whole() -> None:
    """Digesting parts in order gives the whole object's checksum, for every algorithm."""
    data = os.urandom(300_000)
    for algorithm in ("crc32c", "md5", "sha256"):
        digest = ObjectDigest(algorithm)
        for i in range(0, len(data), 65_536):
            digest.part(data[i : i + 65_536])
        whole = ObjectDigest(algorithm)
        whole.part(data)
        assert digest.whole() == whole.whole()


def test_crc32c_encoding_round_trips() -> None:
    """The base64 big-endian encoding round-trips and matches the S3/GCS form."""
    assert encode_crc32c(0xE3069283) == "4waSgw=="  # CRC32C("123456789")
    assert decode_crc32c("4waSgw==") == 0xE3069283


def test_backoff_is_exponential_capped_and_jittered() -> None:
    """Delays double up to max_backoff; jitter stays within [0, bound]."""
    policy = astore.RetryPolicy(initial_backoff=1.0, max_backoff=5.0)
    assert [policy.backoff(n, jitter=False) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]
    rng = random.Random(7)
    for n in range(1, 10):
        assert 0 <= policy.backoff(n, rng=rng) <= min(5.0, 2 ** (n - 1))


def test_backoff_honours_retry_after() -> None:
    """A throttling error's retry_after is a floor for the delay."""
    policy = astore.RetryPolicy(initial_backoff=0.01, max_backoff=10.0)
    err = astore.ThrottledError("slow", retry_after=3.0)
    assert policy.backoff(1, error=err) >= 3.0


@pytest.mark.parametrize("kwargs", [{"max_attempts": 0}, {"deadline": 0}, {"initial_backoff": -1}])
def test_retry_policy_validates(kwargs: dict[str, float]) -> None:
    """Nonsense retry settings raise ConfigurationError."""
    with pytest.raises(astore.ConfigurationError):
        astore.RetryPolicy(**kwargs)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_retry_call_retries_transient_then_succeeds() -> None:
    """Transient errors are retried until the call succeeds."""
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise astore.ServerError("503")
        return "ok"

    policy = astore.RetryPolicy(initial_backoff=0.001, max_backoff=0.001)
    assert await retry_call(policy, flaky, operation="test") == "ok"
    assert calls == 3


@pytest.mark.anyio
async def test_retry_call_raises_last_error_with_notes() -> None:
    """When attempts run out the last error propagates, with a note per attempt."""
    calls = 0

    async def failing() -> None:
        nonlocal calls
        calls += 1
        raise astore.NetworkError(f"reset {calls}")

    policy = astore.RetryPolicy(max_attempts=3, initial_backoff=0.001, max_backoff=0.001)
    with pytest.raises(astore.NetworkError, match="reset 3") as info:
        await retry_call(policy, failing, operation="test")
    assert calls == 3
    notes = "\n".join(info.value.__notes__)
    assert "attempt 1" in notes
    assert "attempt 3" in notes


@pytest.mark.anyio
async def test_retry_call_does_not_retry_permanent_errors() -> None:
    """A non-transient error is raised at once."""
    calls = 0

    async def missing() -> None:
        nonlocal calls
        calls += 1
        raise astore.NotFoundError("gone")

    with pytest.raises(astore.NotFoundError):
        await retry_call(astore.RetryPolicy(), missing, operation="test")
    assert calls == 1


@pytest.mark.anyio
async def test_retry_call_enforces_deadline() -> None:
    """A call that hangs fails with RequestTimeoutError at the deadline."""

    async def hang() -> None:
        await anyio.sleep(30)

    policy = astore.RetryPolicy(deadline=0.2)
    with anyio.fail_after(5), pytest.raises(astore.RequestTimeoutError):
        await retry_call(policy, hang, operation="test")


@pytest.mark.anyio
async def test_byte_budget_blocks_until_released() -> None:
    """A producer waits when the budget is spent and resumes when bytes are released."""
    budget = ByteBudget(10)
    taken = await budget.acquire(8)
    order: list[str] = []

    async def waiter() -> None:
        got = await budget.acquire(5)
        order.append("acquired")
        budget.release(got)

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        order.append("releasing")
        budget.release(taken)
    assert order == ["releasing", "acquired"]
    assert budget.available == 10


@pytest.mark.anyio
async def test_byte_budget_cancelled_waiter_leaks_nothing() -> None:
    """Cancelling a waiting acquire leaves the budget whole."""
    budget = ByteBudget(10)
    taken = await budget.acquire(10)
    with anyio.move_on_after(0.05):
        await budget.acquire(5)
    budget.release(taken)
    assert budget.available == 10


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://bucket/a/b/", ("s3", "bucket", "a/b")),
        ("gs://bkt", ("gs", "bkt", "")),
        ("memory://name/p", ("memory", "name", "p")),
        ("file:///tmp/x", ("file", "/tmp/x", "")),
        ("/tmp/y", ("file", "/tmp/y", "")),
    ],
)
def test_parse_url(url: str, expected: tuple[str, str, str]) -> None:
    """Store URLs split into scheme, container and prefix."""
    assert parse_url(url) == expected


@pytest.mark.parametrize(
    "url",
    ["ftp://host/x", "s3://", "s3://key:secret@bucket/p", "s3://b/p?x=1", "", "file://host/x"],
)
def test_bad_urls_raise_configuration_error(url: str) -> None:
    """Unsupported or malformed URLs raise ConfigurationError, never echoing credentials."""
    with pytest.raises(astore.ConfigurationError) as info:
        astore.open(url)
    assert "secret" not in str(info.value)


def test_unknown_option_raises_configuration_error() -> None:
    """A misspelt backend option raises ConfigurationError at open()."""
    with pytest.raises(astore.ConfigurationError):
        astore.open("memory://x", endpoint="nope")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"part_size": 0},
        {"max_concurrency": -1},
        {"checksum": "crc64"},
        {"max_buffer_bytes": 1},
        {"part_size": 1.5},
    ],
)
def test_transfer_config_validates(kwargs: dict[str, object]) -> None:
    """Invalid transfer settings raise ConfigurationError up front."""
    with pytest.raises(astore.ConfigurationError):
        astore.TransferConfig(**kwargs)  # type: ignore[arg-type]


def test_transfer_config_default_budget() -> None:
    """The default store-wide budget is twice one transfer's buffers."""
    cfg = astore.TransferConfig(part_size=4 * astore.MiB, max_concurrency=3)
    assert cfg.max_buffer_bytes == 24 * astore.MiB
