"""The retry policy: the only retry layer in the process.

The policy is an immutable value. Computing the next delay (:meth:`RetryPolicy.backoff`) is
pure and separate from sleeping; :func:`retry_call` is the loop that applies it. When retries
run out the *last* error propagates unchanged, with a note listing every attempt.

The loop is written here rather than delegated to tenacity: every request of every transfer
passes through it, and tenacity's per-call machinery (building a retrying object, inspecting
the callable) cost about 0.5 ms a call, several times the cost of a small in-memory put.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from ._exceptions import ConfigurationError, RequestTimeoutError, ThrottledError, TransientError

__all__ = ["DEFAULT_RETRY", "RetryPolicy", "retry_call"]

T = TypeVar("T")
log = logging.getLogger("astore.retry")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """When and how long to wait before retrying a failed request.

    Only :class:`~astore.TransientError` s are retried (network errors, timeouts, 5xx,
    throttling), and only on calls that are safe to repeat: reads, single parts, whole-object
    writes. A conditional create whose outcome is unknown is checked against the store before
    it is reported as lost.

    Attributes:
        max_attempts: attempts in all, the first included (1 turns retries off).
        initial_backoff: upper bound of the first delay, in seconds.
        max_backoff: upper bound of any delay, in seconds.
        deadline: seconds one operation may take in all, retries and waits included; past it
            the operation fails with :class:`~astore.RequestTimeoutError`. ``None``: no limit.
        jitter: full jitter (a delay drawn uniformly from 0 to the bound), which spreads
            clients that failed together; ``False`` waits the bound itself.

    Example:
        >>> policy = RetryPolicy(max_attempts=3, initial_backoff=0.5)
        >>> policy.backoff(2, jitter=False)
        1.0
    """

    max_attempts: int = 5
    initial_backoff: float = 0.1
    max_backoff: float = 20.0
    deadline: float | None = 300.0
    jitter: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ConfigurationError(
                f"RetryPolicy.max_attempts must be >= 1, not {self.max_attempts!r}"
            )
        if self.initial_backoff < 0 or self.max_backoff < 0:
            raise ConfigurationError("RetryPolicy backoffs must be >= 0")
        if self.deadline is not None and self.deadline <= 0:
            raise ConfigurationError(
                f"RetryPolicy.deadline must be > 0 or None, not {self.deadline!r}"
            )

    def backoff(
        self,
        attempt: int,
        *,
        error: BaseException | None = None,
        jitter: bool | None = None,
        rng: random.Random | None = None,
    ) -> float:
        """The delay after attempt number ``attempt`` failed with ``error``.

        Exponential (``initial_backoff * 2 ** (attempt - 1)``, capped at ``max_backoff``), with
        full jitter. A throttling error's ``retry_after`` is a floor, even above ``max_backoff``;
        a wait that would pass the deadline ends the retries instead.
        """
        bound = min(self.max_backoff, self.initial_backoff * (2 ** max(attempt - 1, 0)))
        use_jitter = self.jitter if jitter is None else jitter
        delay = (rng or random).uniform(0, bound) if use_jitter else bound
        if isinstance(error, ThrottledError) and error.retry_after is not None:
            # The service's hint wins over our cap; the deadline still bounds the wait.
            delay = max(delay, error.retry_after)
        return delay

    def is_retryable(self, error: BaseException) -> bool:
        """Whether ``error`` is worth another attempt."""
        return isinstance(error, TransientError)


DEFAULT_RETRY = RetryPolicy()


async def retry_call(
    policy: RetryPolicy,
    fn: Callable[[], Awaitable[T]],
    *,
    operation: str,
    key: str | None = None,
    store: str | None = None,
    on_retry: Callable[[int, BaseException], None] | None = None,
) -> T:
    """Run ``fn`` under ``policy``: retry transient errors, enforce the deadline.

    Raises:
        The last error when the attempts run out or the error is not retryable, with a note
        listing the attempts; :class:`~astore.RequestTimeoutError` past the deadline.
    """
    attempts: list[str] = []
    deadline = None if policy.deadline is None else anyio.current_time() + policy.deadline
    try:
        with anyio.fail_after(policy.deadline):
            attempt = 0
            while True:
                attempt += 1
                try:
                    return await fn()
                except Exception as exc:
                    if not policy.is_retryable(exc) or attempt >= policy.max_attempts:
                        if attempts:
                            attempts.append(f"attempt {attempt}: {type(exc).__name__}: {exc}")
                            _note_attempts(exc, attempts, policy)
                        raise
                    delay = policy.backoff(attempt, error=exc)
                    if deadline is not None and anyio.current_time() + delay >= deadline:
                        attempts.append(f"attempt {attempt}: {type(exc).__name__}: {exc}")
                        exc.add_note(
                            f"astore stopped retrying: the next wait passes the "
                            f"{policy.deadline}s deadline"
                        )
                        _note_attempts(exc, attempts, policy)
                        raise
                    attempts.append(f"attempt {attempt}: {type(exc).__name__}: {exc}")
                    log.debug("retrying %s after %s (waiting %.3fs)", operation, exc, delay)
                    if on_retry is not None:
                        on_retry(attempt, exc)
                await anyio.sleep(delay)
    except TimeoutError as exc:
        if isinstance(exc, RequestTimeoutError):
            raise
        err = RequestTimeoutError(
            f"gave up after the {policy.deadline}s deadline",
            key=key,
            store=store,
            operation=operation,
        )
        _note_attempts(err, attempts, policy)
        raise err from exc


def _note_attempts(exc: BaseException, attempts: list[str], policy: RetryPolicy) -> None:
    if attempts:
        exc.add_note(
            f"astore retried {len(attempts) - 1} time(s) (max_attempts={policy.max_attempts}):"
        )
        for line in attempts:
            exc.add_note(f"  {line}")
