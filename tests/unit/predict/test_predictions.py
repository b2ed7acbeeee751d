"""The prediction from a baseline run (speclab.predict.predictions): its interval, the level
simulation's place in it, and speculative mode's cost, stated or learnt (recorded float32 runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from speclab.options import default_option
from speclab.predict.predictions import _overhead_range, predict_from_baseline
from speclab.predict.stepmodel import calibrate_from_runs

RUNS = Path(__file__).resolve().parents[2] / "data" / "predict"


def _widths(divergence_share: float):
    from speclab.options import default_option
    from speclab.predict.predictions import predict_from_baseline

    model = calibrate_from_runs(RUNS / "f32-baseline", RUNS / "f32-ngram")
    table = predict_from_baseline(RUNS / "f32-baseline", default_option("ngram", 4), model,
                                  batch_mix="level", divergence_share=divergence_share)
    width = table["predicted_speedup_high"] - table["predicted_speedup_low"]
    return table.assign(width=width).set_index(["category", "concurrency"])["width"]


def test_more_data_narrows_the_interval_where_acceptance_is_resampled() -> None:
    # An option that may write other answers (share 1): its acceptance is resampled from the
    # prompts. The 'all' rows pool 8 prompts, a category 2: the pooled interval is narrower (at
    # c=1 the pool mixes categories whose tokens per step differ twofold, which widens it as much)
    cells = _widths(1.0)
    assert cells[("all", 4)] < cells[("code_editing", 4)] / 2


def test_an_option_that_writes_the_same_answers_has_no_acceptance_term() -> None:
    # float32 and lossless (share 0): the same prompts give the same texts, hence exactly the
    # replayed acceptance; only the calibration and run-to-run terms are left, in every cell
    unknown, same = _widths(1.0), _widths(0.0)
    assert (same < unknown).all()
    assert same[("code_editing", 4)] < unknown[("code_editing", 4)] / 5


def test_a_server_instance_spread_widens_every_interval() -> None:
    from speclab.options import default_option
    from speclab.predict.predictions import predict_from_baseline

    model = calibrate_from_runs(RUNS / "f32-baseline", RUNS / "f32-ngram")
    widths = []
    for spread in (0.0, 0.05):
        table = predict_from_baseline(RUNS / "f32-baseline", default_option("ngram", 4), model,
                                      batch_mix="level", instance_sd=spread)
        widths.append((table["predicted_speedup_high"] - table["predicted_speedup_low"]).to_numpy())
    assert (widths[1] > widths[0]).all()


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


def test_a_measured_cost_replaces_the_stated_range_where_it_was_measured() -> None:
    from speclab.options import default_option
    from speclab.predict.costmodel import VerifyCost
    from speclab.predict.predictions import predict_from_baseline
    from speclab.predict.stepmodel import baseline_step_model

    model = baseline_step_model(RUNS / "stream-f32-baseline", VerifyCost(per_token_s=0.002), source="given")
    model.spec_mode_overhead_s = (0.0005, 0.003)
    option = default_option("ngram", 4)
    stated = predict_from_baseline(RUNS / "stream-f32-baseline", option, model, batch_mix="level")
    model.spec_mode_overhead_by_concurrency = {1: (-0.012, -0.010)}
    model.spec_mode_overhead_origin = "run-x"
    learnt = predict_from_baseline(RUNS / "stream-f32-baseline", option, model, batch_mix="level")
    at = lambda t, c: t[(t["category"] == "all") & (t["concurrency"] == c)].iloc[0]  # noqa: E731
    one, one_stated = at(learnt, 1), at(stated, 1)
    # the point moves from the stated middle (+1.75 ms) to the measured one (-11 ms) a step
    ratio = (one_stated["spec_step_ms"] - 1.75 - 11.0) / one_stated["spec_step_ms"]
    assert one["predicted_speedup"] == pytest.approx(one_stated["predicted_speedup"] / ratio, rel=1e-6)
    assert one["spec_mode_overhead_ms"] == "-12--10 ms (measured in run-x)"
    assert at(learnt, 4)["predicted_speedup"] == at(stated, 4)["predicted_speedup"]
    assert at(learnt, 4)["spec_mode_overhead_ms"] == "0.5-3 ms"
    model.spec_mode_overhead_s = None  # calibrate: its fit measured its own, nothing is added
    assert model.spec_mode_overhead_for(1) == (None, "assumed")


def test_the_speculative_mode_range_decides_or_names_what_would() -> None:
    interval = {"predicted_speedup_low": 1.1, "predicted_speedup_high": 1.3, "predicted_verdict": "x"}
    # 20 ms steps at 1.2x: the point breaks even at 4 ms of speculative-mode cost, inside 1-6 ms
    unclear = _overhead_range(1.2, 0.020, interval, (0.001, 0.006))
    assert unclear["interval"]["predicted_verdict"] == ("unclear: wins unless speculative mode costs more than "
                                                        "4.0 ms a step (range 1-6 ms)")
    assert unclear["speedup"] == pytest.approx(1.2 * 0.020 / 0.0235)
    assert unclear["interval"]["predicted_speedup_low"] == pytest.approx(1.1 * 20 / 26)
    # outside the range the interval itself is what leaves it open
    assert _overhead_range(1.2, 0.020, interval, (0.0005, 0.003))["interval"]["predicted_verdict"].startswith(
        "unclear: the interval includes 1")
    win = _overhead_range(1.6, 0.020, {**interval, "predicted_speedup_low": 1.5, "predicted_speedup_high": 1.7},
                          (0.0005, 0.003))
    assert win["interval"]["predicted_verdict"] == "predicted to win"
    assert win["break_even_overhead_ms"] == pytest.approx(12.0)
    lose = _overhead_range(0.8, 0.020, {**interval, "predicted_speedup_low": 0.7, "predicted_speedup_high": 0.9},
                           (0.0005, 0.003))
    assert lose["interval"]["predicted_verdict"] == "predicted to lose" and lose["break_even_overhead_ms"] == 0.0
    measured = _overhead_range(1.2, 0.020, interval, None)
    assert measured["interval"] is interval and measured["range_text"] == "measured (calibrate)"
