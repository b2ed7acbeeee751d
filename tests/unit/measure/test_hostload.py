"""Host load: speclab's own CPU told apart from the neighbours' (speclab.measure.hostload); the
comparisons it contaminates are named in tests/unit/predict/test_compare.py."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from speclab.measure import hostload

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_a_busy_child_is_counted_as_our_own_cpu() -> None:
    before = hostload.sample()
    child = subprocess.Popen([sys.executable, "-c", "import time\nt=time.process_time()\n"
                              "while time.process_time()-t<0.6: pass\ntime.sleep(5)"])
    try:
        time.sleep(0.1)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            now = hostload.sample()
            if now is not None and before is not None and now.own_ticks - before.own_ticks >= 0.5 * 100:
                break
            time.sleep(0.2)
        after = hostload.sample()
    finally:
        child.kill()
        child.wait()
    assert before is not None and after is not None
    import os

    hz = os.sysconf("SC_CLK_TCK")
    assert (after.own_ticks - before.own_ticks) / hz >= 0.5  # the child's 0.6 s of CPU is ours
    window = hostload.window(before, after)
    assert window["host_busy_cores"] is not None and window["foreign_cpu_cores"] >= 0
    assert window["cpu_steal_pct"] is not None and 0 <= window["cpu_steal_pct"] <= 100


def test_window_arithmetic_in_cores() -> None:
    import os

    hz = os.sysconf("SC_CLK_TCK")
    a = hostload.CpuSample(wall_s=10.0, busy_ticks=0, steal_ticks=0, total_ticks=0, own_ticks=0)
    b = hostload.CpuSample(wall_s=12.0, busy_ticks=3 * hz, steal_ticks=int(0.4 * hz), total_ticks=4 * hz,
                           own_ticks=2 * hz)
    window = hostload.window(a, b)
    assert window["host_busy_cores"] == pytest.approx(1.5)
    assert window["foreign_cpu_cores"] == pytest.approx(0.5)  # 3 s busy, 2 s ours, over 2 s
    assert window["cpu_steal_pct"] == pytest.approx(10.0)
    assert hostload.window(None, b)["foreign_cpu_cores"] is None


def test_the_probe_times_real_work() -> None:
    probe = hostload.speed_probe_ms(repeats=2)
    assert isinstance(probe, float) and 0.5 < probe < 5000.0  # ms of a fixed workload, not a stub
