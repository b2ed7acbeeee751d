"""The harness (speclab.measure.client.harness): the loop-lag monitor sees a blocked loop."""

from __future__ import annotations

import asyncio
import time

from speclab.measure.client import LoopLagMonitor, measure_loop_lag


def test_loop_lag_monitor_sees_a_blocked_loop() -> None:
    async def main():
        monitor = LoopLagMonitor(interval_s=0.01)
        monitor.start()
        await asyncio.sleep(0.05)
        time.sleep(0.08)  # noqa: ASYNC251 - the harness "busy" for 80 ms, on purpose
        await asyncio.sleep(0.05)
        summary = await monitor.stop()
        async with measure_loop_lag() as idle:
            await asyncio.sleep(0.05)
        return summary, idle.summary()

    busy, idle = asyncio.run(main())
    assert busy["max_s"] >= 0.06 and busy["samples"] >= 5
    assert busy["p50_s"] < 0.02
    assert idle["samples"] >= 2 and idle["max_s"] < 0.05
