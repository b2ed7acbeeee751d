"""The configuration search: a schedule that beats a fixed k, one that loses once its own cost is
paid, and traffic beyond the sweep."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from speclab.options import default_option
from speclab.predict import configsearch

SWEPT = [1, 4, 16]
BASE_MS = {1: 20.0, 4: 25.0, 16: 40.0}


def _prediction(speedups: dict[int, float], spread: float = 0.03) -> pd.DataFrame:
    rows = []
    for c, s in speedups.items():
        rows.append({"concurrency": c, "predicted_speedup": s, "predicted_speedup_low": s * (1 - spread),
                     "predicted_speedup_high": s * (1 + spread), "baseline_step_ms": BASE_MS[c],
                     "spec_step_ms": BASE_MS[c] * 2.0 / s})
    return pd.DataFrame(rows)


# n-gram wins at small batches and loses at 16 whatever k: the motivating team's case in miniature
PREDICTIONS = {("ngram", k): _prediction({1: 1.0 + 0.1 * k, 4: 1.0 + 0.03 * k, 16: 1.0 - 0.04 * k})
               for k in (1, 2, 3, 4)}
TRAFFIC = [{"concurrency": 1, "hours_per_day": 4}, {"concurrency": 16, "hours_per_day": 10}]


def _search(schedule_ms: float, traffic=TRAFFIC, off_ms: float = 0.2) -> configsearch.Search:
    return configsearch.search(
        PREDICTIONS, traffic, engine="vllm", option_for=default_option,
        off_cost_ms=lambda method, c: (0.0, off_ms),
        schedule_cost_ms=lambda method, c: (schedule_ms * 0.8, schedule_ms, "a test's schedule cost"))


def test_a_schedule_that_speculates_at_small_batches_only_beats_every_fixed_k() -> None:
    found = _search(schedule_ms=0.0)
    best = found.recommended
    assert best is not None and best.schedule is not None
    # k=4 wins at 1 and 4, loses at 16: on up to batch 8 (between 4 and 16), off above
    assert best.schedule == [(1, 8, 4), (9, 256, 0)]
    fixed = [c for c in found.candidates if c.schedule is None]
    assert all(not c.eligible for c in fixed)  # every fixed k loses beyond the tolerance at 16
    assert "loses" in fixed[0].why_not and "concurrency 16" in fixed[0].why_not
    args = configsearch.restart_args("vllm", best.option, best.schedule)
    config = json.loads(args[1])
    assert args[0] == "--speculative-config" and config["method"] == "ngram"
    assert config["num_speculative_tokens"] == 4 and config["num_speculative_tokens_per_batch_size"] == [[1, 8, 4], [9, 256, 0]]
    # gain: 4 h at 1.4x frees 4 * (1 - 1/1.4) h; at 16 off costs 0.1 ms of a 40 ms step
    assert best.daily_gain_h == pytest.approx(4 * (1 - 1 / 1.4) + 10 * (1 - (40 + 0.1) / 40), rel=1e-3)


def test_a_schedule_loses_to_keeping_the_baseline_once_its_own_cost_is_paid() -> None:
    found = _search(schedule_ms=4.0)  # a 4 ms a step tax, on every step, off ranges included
    scheduled = [c for c in found.candidates if c.schedule is not None]
    assert scheduled and all(not c.eligible for c in scheduled)
    assert found.recommended is None
    assert found.plan[0].startswith("Keep the baseline")


def test_traffic_beyond_the_sweep_is_never_judged_and_the_plan_says_how_to_add_it() -> None:
    traffic = [{"concurrency": 1, "hours_per_day": 4}, {"concurrency": 128, "hours_per_day": 6}]
    found = _search(schedule_ms=0.0, traffic=traffic)
    assert found.unjudged == [(128.0, 6.0)]
    cells = found.recommended.cells.set_index("concurrency")
    assert not bool(cells.loc[128.0, "judged"]) and pd.isna(cells.loc[128.0, "speedup"])
    assert any("beyond the sweep (1-16)" in line and "add it to 01's concurrency" in line for line in found.plan)
    # only the judged hours count: 4 h at 1.4x
    assert found.recommended.daily_gain_h == pytest.approx(4 * (1 - 1 / 1.4), rel=1e-3)


def test_sglang_gets_its_own_flags_and_no_schedule() -> None:
    found = configsearch.search(PREDICTIONS, [{"concurrency": 1, "hours_per_day": 10}], engine="sglang",
                                option_for=default_option, off_cost_ms=lambda m, c: (0.0, 0.0), schedule_cost_ms=None)
    assert all(c.schedule is None for c in found.candidates)
    best = found.recommended
    assert best is not None and best.option.num_speculative_tokens == 4
    assert configsearch.restart_args("sglang", best.option, None)[:2] == ["--speculative-algorithm", "NGRAM"]
