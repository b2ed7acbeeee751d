"""What the calibration counts as a step, how it weighs levels, and the level simulation's
place in a prediction (recorded float32 runs and small frames)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from speclab.options import default_option
from speclab.predict.costmodel import fit_step_time
from speclab.predict.predictions import predict_from_baseline
from speclab.predict.stepmodel import calibrate_from_runs
from speclab.predict.timings import spec_level_points

RUNS = Path(__file__).resolve().parents[2] / "data" / "predict"


def test_steps_come_from_the_stream_when_counters_over_count_accepted_tokens() -> None:
    points = spec_level_points(RUNS / "f32-baseline", RUNS / "f32-ngram")
    # the server counts drafts accepted past max_tokens, which it then drops: fewer steps
    assert (points["chunk_steps"] > points["counter_steps"]).all()
    assert points["steps"].tolist() == points["chunk_steps"].tolist() == [504.0, 599.0]


def test_a_small_level_pulls_the_fit_less_than_a_large_one() -> None:
    baseline = pd.DataFrame({"batch": [1.0, 8.0], "step_s": [0.030, 0.040]})

    def points(noisy_steps: float) -> pd.DataFrame:
        # three levels on the line 1 ms + 1 ms per extra token, and one small level far above it
        return pd.DataFrame({
            "batch": [1.0, 4.0, 8.0, 1.0], "verified_tokens_per_seq": [2.0, 2.0, 2.0, 3.0],
            "baseline_step_s": [0.030, 0.035, 0.040, 0.030],
            "step_s": [0.032, 0.040, 0.049, 0.030 + 0.013], "steps": [800.0, 800.0, 800.0, noisy_steps]})

    light = fit_step_time(baseline, points(20.0), exponent=1.0).verify
    heavy = fit_step_time(baseline, points(800.0), exponent=1.0).verify
    assert light.per_token_s == pytest.approx(0.001, rel=0.15) and light.overhead_s == pytest.approx(0.001, rel=0.5)
    assert abs(heavy.overhead_s + heavy.per_token_s * 2 - 0.003) > abs(light.overhead_s + light.per_token_s * 2 - 0.003)


def test_at_concurrency_one_the_level_simulation_is_the_steady_formula() -> None:
    model = calibrate_from_runs(RUNS / "f32-baseline", RUNS / "f32-ngram")
    table = predict_from_baseline(RUNS / "f32-baseline", default_option("ngram", 4), model, batch_mix="level")
    one = table[(table["category"] == "all") & (table["concurrency"] == 1)].iloc[0]
    steady = one["tokens_per_step"] * one["baseline_step_ms"] / (
        one["baseline_step_ms"] + model.extra_s(1.0, one["verified_tokens_per_seq"]) * 1e3)
    assert one["predicted_speedup"] == pytest.approx(steady, rel=1e-6)
    assert one["predicted_spec_batch"] == pytest.approx(1.0)
    four = table[(table["category"] == "all") & (table["concurrency"] == 4)].iloc[0]
    assert four["predicted_spec_batch"] < four["batch"]  # requests finish unevenly under speculation
