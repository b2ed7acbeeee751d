"""Host load: speclab's own CPU told apart from the neighbours', and contaminated comparisons named."""

from __future__ import annotations

import subprocess
import sys
import time

import pandas as pd
import pytest

from speclab.measure import hostload
from speclab.predict.compare import host_load_by_arm, load_contamination

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


def _levels(*foreign: float, steal: float = 0.0) -> pd.DataFrame:
    return pd.DataFrame({"concurrency": list(range(1, len(foreign) + 1)),
                         "host_load": [{"foreign_cpu_cores": f, "cpu_steal_pct": steal} for f in foreign]})


def test_a_comparison_under_changed_load_is_called_contaminated() -> None:
    quiet = {"baseline": _levels(0.05, 0.1), "ngram": _levels(0.1, 0.05)}
    assert load_contamination(quiet) is None
    noisy = {"baseline": _levels(0.05, 0.1), "ngram": _levels(0.7, 0.9)}
    sentence = load_contamination(noisy)
    assert sentence is not None and sentence.startswith("CONTAMINATED") and "ngram" in sentence
    assert "\n" not in sentence
    stolen = load_contamination({"baseline": _levels(0.1, steal=12.0), "ngram": _levels(0.1)})
    assert stolen is not None and "steal" in stolen
    table = host_load_by_arm(noisy).set_index("arm")
    assert table.loc["ngram", "foreign_cpu_cores_mean"] == pytest.approx(0.8)
    # runs recorded before host load existed: nothing to say, no error
    assert load_contamination({"a": pd.DataFrame({"concurrency": [1]}), "b": _levels(0.9)}) is None


def _probed(*probe_ms: float) -> pd.DataFrame:
    return pd.DataFrame({"concurrency": list(range(1, len(probe_ms) + 1)),
                         "host_load": [{"foreign_cpu_cores": 0.02, "cpu_steal_pct": 0.0, "host_probe_ms": p}
                                       for p in probe_ms]})


def test_a_host_that_ran_slower_during_one_arm_is_named() -> None:
    steady = {"baseline": _probed(10.0, 10.4, 9.9), "ngram": _probed(10.3, 10.1, 10.6)}
    assert load_contamination(steady) is None
    slowed = {"baseline": _probed(10.0, 10.4, 9.9), "ngram": _probed(12.8, 13.1, 12.9)}
    sentence = load_contamination(slowed)
    assert sentence is not None and sentence.startswith("CONTAMINATED")
    assert "29 % slower during ngram than during baseline" in sentence  # 12.9 / 10.0 medians
    assert host_load_by_arm(slowed).set_index("arm").loc["ngram", "host_probe_ms_median"] == pytest.approx(12.9)


def test_the_probe_times_real_work() -> None:
    probe = hostload.speed_probe_ms(repeats=2)
    assert isinstance(probe, float) and 0.5 < probe < 5000.0  # ms of a fixed workload, not a stub


def _lagged(*max_lag_s: float) -> pd.DataFrame:
    return pd.DataFrame({"concurrency": list(range(1, len(max_lag_s) + 1)),
                         "harness": [{"p99_s": 0.001, "max_s": lag} for lag in max_lag_s]})


def test_a_client_stall_during_an_arm_is_named() -> None:
    # every level of a quiet host lagged <= 0.1 s; a stall of a second lost a stream's timing
    assert load_contamination({"baseline": _lagged(0.004, 0.09), "ngram": _lagged(0.01, 0.02)}) is None
    sentence = load_contamination({"baseline": _lagged(0.004, 0.09), "ngram": _lagged(0.01, 1.22)})
    assert sentence is not None and sentence.startswith("CONTAMINATED")
    assert "stalled for up to 1.22 s during ngram" in sentence and "baseline" not in sentence.split("during")[1]
    table = host_load_by_arm({"ngram": _lagged(0.01, 1.22)}).set_index("arm")
    assert table.loc["ngram", "client_stall_s_max"] == pytest.approx(1.22)
