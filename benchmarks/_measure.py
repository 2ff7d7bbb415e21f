"""What one benchmark run measures about its own client process.

Imported by every client runner, in the project's venv and in the peers' venv alike, so it
uses the standard library only (Linux ``/proc`` where it helps, ``resource`` otherwise):

- wall time (``time.perf_counter``);
- client CPU seconds, user + sys, of this process only (``getrusage(RUSAGE_SELF)`` deltas);
- peak RSS during the run: the kernel's high-water mark is reset before the run
  (``/proc/self/clear_refs``) and read after it (``VmHWM``), and the RSS just before the run
  is kept as the idle baseline;
- event-loop lag (asyncio clients): a heartbeat task sleeps 1 ms in a loop and records how
  late it wakes up; the worst and the 99th percentile are reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Heartbeat", "Sample", "measure", "measure_async", "peak_rss", "rss"]

HEARTBEAT_S = 0.001


def _status_kib(field_name: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def rss() -> int:
    """Resident set size of this process now, in bytes."""
    kib = _status_kib("VmRSS")
    if kib is None:  # no /proc: the lifetime peak is the best we have
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return kib * 1024


def reset_peak() -> bool:
    """Reset the kernel's RSS high-water mark (Linux >= 4.0); False where that is impossible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def peak_rss() -> int:
    """Peak resident set size since the last :func:`reset_peak` (else since start), bytes."""
    kib = _status_kib("VmHWM")
    if kib is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return kib * 1024


def _cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


@dataclass
class Sample:
    """One measured run."""

    wall_s: float = 0.0
    user_s: float = 0.0
    sys_s: float = 0.0
    idle_rss: int = 0
    peak_rss: int = 0
    peak_is_local: bool = True  # False: the peak is the process's lifetime peak
    lag_max_ms: float | None = None
    lag_p99_ms: float | None = None
    beats: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def cpu_s(self) -> float:
        return self.user_s + self.sys_s

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cpu_s"] = self.cpu_s
        return out


@contextlib.contextmanager
def measure() -> Iterator[Sample]:
    """Measure the block: wall, CPU and peak RSS of this process."""
    sample = Sample()
    sample.peak_is_local = reset_peak()
    sample.idle_rss = rss()
    user0, sys0 = _cpu()
    t0 = time.perf_counter()
    try:
        yield sample
    finally:
        sample.wall_s = time.perf_counter() - t0
        user1, sys1 = _cpu()
        sample.user_s, sample.sys_s = user1 - user0, sys1 - sys0
        sample.peak_rss = max(peak_rss(), sample.idle_rss)


class Heartbeat:
    """A task that sleeps 1 ms over and over and records how late each wake-up is."""

    def __init__(self, interval: float = HEARTBEAT_S) -> None:
        self.interval = interval
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        interval = self.interval
        clock = time.perf_counter
        while True:
            t0 = clock()
            await asyncio.sleep(interval)
            self.lags.append(max(clock() - t0 - interval, 0.0))

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> tuple[float, float, int]:
        """Stop; returns ``(worst_ms, p99_ms, beats)``."""
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        if not self.lags:
            return 0.0, 0.0, 0
        ordered = sorted(self.lags)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        return ordered[-1] * 1e3, p99 * 1e3, len(ordered)


@contextlib.asynccontextmanager
async def measure_async() -> AsyncIterator[Sample]:
    """:func:`measure`, plus the event loop's lag measured by a 1 ms heartbeat."""
    beat = Heartbeat()
    with measure() as sample:
        beat.start()
        try:
            yield sample
        finally:
            sample.lag_max_ms, sample.lag_p99_ms, sample.beats = await beat.stop()
