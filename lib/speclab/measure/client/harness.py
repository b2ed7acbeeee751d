"""Harness health: uvloop, and the loop-lag monitor that says when the client itself was late."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from speclab.stats import quantile

_perf = time.perf_counter


def use_uvloop() -> bool:
    """Install uvloop's event-loop policy (call before ``asyncio.run``); False if absent."""
    try:
        import uvloop
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


class LoopLagMonitor:
    """Wakes every ``interval_s`` and records how late it woke: the harness's own lag.

    When the client's event loop is busy parsing streams, every timestamp it takes is
    late by about this much; a run whose p99 lag approaches its inter-token times
    measured the client, not the server. Expect ~0.1-1 ms at idle (timer granularity).
    """

    def __init__(self, interval_s: float = 0.01) -> None:
        self.interval_s = interval_s
        self.samples_s: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start sampling on the running loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> dict[str, float | int | None]:
        """Stop sampling and return ``summary()``."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        return self.summary()

    async def _run(self) -> None:
        interval = self.interval_s
        samples = self.samples_s
        while True:
            due = _perf() + interval
            await asyncio.sleep(interval)
            lag = _perf() - due
            samples.append(max(0.0, lag))

    @property
    def p50_s(self) -> float | None:
        return quantile(self.samples_s, 0.5)

    @property
    def p99_s(self) -> float | None:
        return quantile(self.samples_s, 0.99)

    @property
    def max_s(self) -> float | None:
        return max(self.samples_s) if self.samples_s else None

    def summary(self) -> dict[str, float | int | None]:
        """``{"samples", "p50_s", "p99_s", "max_s", "mean_s"}``."""
        values = sorted(self.samples_s)
        return {
            "samples": len(values),
            "p50_s": quantile(values, 0.5),
            "p99_s": quantile(values, 0.99),
            "max_s": values[-1] if values else None,
            "mean_s": sum(values) / len(values) if values else None,
        }


@contextlib.asynccontextmanager
async def measure_loop_lag(interval_s: float = 0.01) -> AsyncIterator[LoopLagMonitor]:
    """``async with measure_loop_lag() as lag: ...``; read ``lag.summary()`` afterwards."""
    monitor = LoopLagMonitor(interval_s)
    monitor.start()
    try:
        yield monitor
    finally:
        await monitor.stop()
