"""The cost model on synthetic measurements, the seeds' scenario, payback, and the
notebook API on a recorded baseline/ngram pair."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from speclab.errors import SpeclabError
from speclab.moe.seeds import SeedScenario
from speclab.predict.costmodel import (
    CalibratedStepTime,
    VerifyCost,
    best_k,
    break_even_acceptance_length,
    expected_tokens_per_step,
    fit_step_time,
    leviathan_speedup,
    predict_speedup,
    speedup_table,
)
from speclab.predict.payback import payback_hours

DATA = Path(__file__).parents[2] / "data" / "predict"


def _truth(batch: float, n: float, o: float = 0.004, d: float = 0.0025) -> float:
    base = 0.020 + 0.003 * batch
    return base + (o + d * batch * (n - 1) if n > 1 else 0.0)


# --------------------------------------------------------------------------- formulas


def test_leviathan_expected_tokens() -> None:
    assert expected_tokens_per_step(0.0, 4) == 1.0
    assert expected_tokens_per_step(1.0, 4) == 5.0
    assert expected_tokens_per_step(0.5, 4) == pytest.approx(1.9375)
    assert leviathan_speedup(0.5, 4) == pytest.approx(1.9375)
    assert leviathan_speedup(0.5, 4, draft_cost_ratio=0.05, verify_cost_ratio=1.2) == pytest.approx(1.9375 / 1.4)
    with pytest.raises(SpeclabError):
        expected_tokens_per_step(1.5, 4)


# --------------------------------------------------------------------------- fitting


def test_fit_recovers_overhead_and_per_token_cost_from_noisy_points() -> None:
    rng = np.random.default_rng(0)
    batches = [1, 2, 4, 8]
    baseline = pd.DataFrame({"batch": batches, "step_s": [_truth(b, 1) for b in batches]})
    rows = []
    for b in batches:
        for n in (1.3, 1.8, 2.5, 3.2):
            rows.append({"batch": b, "verified_tokens_per_seq": n,
                         "step_s": _truth(b, n) * (1 + rng.normal(0, 0.01))})
    model = fit_step_time(baseline, pd.DataFrame(rows))
    assert model.verify.overhead_s == pytest.approx(0.004, abs=0.0015)
    assert model.verify.per_token_s == pytest.approx(0.0025, rel=0.08)
    assert model.step_time_s(4, 1.0) == pytest.approx(_truth(4, 1))
    assert model.step_time_s(4, 3.0) == pytest.approx(_truth(4, 3), rel=0.03)
    assert model.points is not None and "residual_ms" in model.points


def test_fit_finds_a_falling_marginal_token_cost() -> None:
    batches = [1, 4, 8]
    baseline = pd.DataFrame({"batch": batches, "step_s": [_truth(b, 1) for b in batches]})
    rows = [{"batch": b, "verified_tokens_per_seq": n,
             "step_s": _truth(b, 1) + 0.0022 * (b * (n - 1)) ** 0.8}
            for b in batches for n in (1.4, 2.0, 2.8)]
    model = fit_step_time(baseline, pd.DataFrame(rows))
    assert model.verify.exponent == pytest.approx(0.8)
    assert model.verify.per_token_s == pytest.approx(0.0022, rel=0.01)
    assert model.verify.overhead_s == pytest.approx(0.0, abs=1e-6)
    linear = fit_step_time(baseline, pd.DataFrame(rows), exponent=1.0)
    assert linear.verify.exponent == 1.0
    assert (linear.points["residual_ms"].abs().max() > model.points["residual_ms"].abs().max())


def test_fit_finds_a_knee_below_which_extra_tokens_are_free() -> None:
    """A step of few tokens is bound by reading the weights (run 7, docs/predictor.md): the
    fit finds where extra tokens start to cost, and prices one sequence's drafts below it
    at the overhead alone, where a knee-free line would charge them."""
    batches = [1, 4, 8]
    baseline = pd.DataFrame({"batch": batches, "step_s": [_truth(b, 1) for b in batches]})

    def truth(b: float, n: float) -> float:
        return _truth(b, 1) + 0.001 + 0.002 * (max(b * n, 3.0) - max(b, 3.0))

    rows = [{"batch": b, "verified_tokens_per_seq": n, "step_s": truth(b, n)}
            for b in batches for n in (1.4, 2.0, 2.8)]
    assert fit_step_time(baseline, pd.DataFrame(rows)).verify.knee_tokens == 1.0  # searched only when asked
    model = fit_step_time(baseline, pd.DataFrame(rows), knee_tokens=None)
    assert model.verify.knee_tokens == 3.0 and model.verify.exponent == 1.0
    assert model.verify.per_token_s == pytest.approx(0.002, rel=0.01)
    assert model.extra_s(1, 2.0) == pytest.approx(0.001, abs=1e-6)  # 2 tokens: below the knee
    assert model.extra_s(4, 2.0) == pytest.approx(0.001 + 0.002 * 4, rel=0.01)
    no_knee = fit_step_time(baseline, pd.DataFrame(rows), knee_tokens=1.0)
    assert no_knee.points["residual_ms"].abs().max() > 10 * model.points["residual_ms"].abs().max()
    # the falling-cost truth of the test above keeps no knee
    bend = [{**r, "step_s": _truth(r["batch"], 1) + 0.0022 * (r["batch"] * (r["verified_tokens_per_seq"] - 1)) ** 0.8}
            for r in rows]
    assert fit_step_time(baseline, pd.DataFrame(bend), knee_tokens=None).verify.knee_tokens == 1.0


def test_fit_never_returns_negative_costs() -> None:
    baseline = pd.DataFrame({"batch": [1, 4], "step_s": [0.02, 0.03]})
    # speculative steps measured *faster* than baseline (noise): costs clip at zero
    points = pd.DataFrame({"batch": [1, 4], "verified_tokens_per_seq": [2.0, 2.0], "step_s": [0.019, 0.029]})
    model = fit_step_time(baseline, points)
    assert model.verify.overhead_s >= 0 and model.verify.per_token_s >= 0


def test_without_spec_points_the_baseline_slope_is_used_and_flagged() -> None:
    baseline = pd.DataFrame({"batch": [1, 4, 8], "step_s": [_truth(b, 1) for b in (1, 4, 8)]})
    model = fit_step_time(baseline)
    assert model.verify.per_token_s == pytest.approx(0.003)
    assert any("ASSUMED" in note for note in model.notes)
    with pytest.raises(SpeclabError):
        fit_step_time(baseline.iloc[:1])


def test_baseline_curve_interpolates_and_extrapolates() -> None:
    model = CalibratedStepTime(pd.DataFrame({"batch": [1, 4], "step_s": [0.02, 0.05]}), VerifyCost(per_token_s=0.0))
    assert model.baseline_step_s(2.5) == pytest.approx(0.035)
    assert model.baseline_step_s(8) == pytest.approx(0.09)
    assert model.baseline_step_s(-100) == pytest.approx(0.002)  # floored, never <= 0


# --------------------------------------------------------------------------- predictions


def _model(o: float = 0.004, d: float = 0.0025) -> CalibratedStepTime:
    batches = [1, 2, 4, 8, 16]
    baseline = pd.DataFrame({"batch": batches, "step_s": [_truth(b, 1) for b in batches]})
    return CalibratedStepTime(baseline, VerifyCost(overhead_s=o, per_token_s=d))


def test_free_verification_gives_the_naive_speedup() -> None:
    row = predict_speedup(_model(0.0, 0.0), 4, tokens_per_step=1.9, verified_tokens_per_seq=5)
    assert row["speedup"] == pytest.approx(1.9)
    assert row["spec_tok_s"] == pytest.approx(1.9 * row["baseline_tok_s"])


def test_speedup_shrinks_with_batch_and_break_even_rises() -> None:
    table = speedup_table(_model(), [1, 4, 16], alpha=0.6, k=4)
    assert list(table["speedup"]) == sorted(table["speedup"], reverse=True)
    assert list(table["break_even_acceptance_length"]) == sorted(table["break_even_acceptance_length"])
    model = _model()
    for batch in (1, 4, 16):
        be = break_even_acceptance_length(model, batch, 4)
        # at the break-even acceptance length (every step drafting) the speedup is 1
        row = predict_speedup(model, batch, tokens_per_step=be, verified_tokens_per_seq=5)
        assert row["speedup"] == pytest.approx(1.0)
    assert math.isnan(break_even_acceptance_length(model, 1, 4, draft_fraction=0))


def test_best_k_balances_acceptance_and_verify_cost() -> None:
    cheap = best_k(_model(0.0, 0.0), 1, acceptance=0.8)
    assert cheap.loc[cheap["best"], "k"].item() == 8  # free verification: draft as much as possible
    costly = best_k(_model(0.004, 0.02), 1, acceptance=0.6)
    k = costly.loc[costly["best"], "k"].item()
    assert 1 <= k < 8
    # a replay-style acceptance function is accepted too
    table = best_k(_model(), 2, acceptance=lambda k: (1 + 0.3 * k, 1 + k), ks=[1, 2, 3])
    assert list(table["k"]) == [1, 2, 3]


# --------------------------------------------------------------------------- payback


def test_payback_hours() -> None:
    frame = payback_hours(1800, {1: 2.0, 8: 1.5}, [{"concurrency": 1, "hours_per_day": 24}])
    total = frame.iloc[-1]
    # 24 h at speedup 2 frees 12 server-hours a day: 0.5 per hour; 0.5 h downtime -> 1 h
    assert total["server_hours_freed_per_day"] == pytest.approx(12.0)
    assert total["payback_hours"] == pytest.approx(1.0)
    assert bool(total["pays_back"])
    # interpolated speedup between levels
    frame = payback_hours(1800, {1: 2.0, 8: 1.5}, [{"concurrency": 4.5, "hours_per_day": 12}])
    assert frame.iloc[0]["speedup"] == pytest.approx(1.75)


def test_payback_never_when_the_option_loses() -> None:
    frame = payback_hours(1800, lambda c: 0.9, [{"concurrency": 8, "hours_per_day": 10}])
    assert math.isinf(frame.iloc[-1]["payback_hours"]) and not frame.iloc[-1]["pays_back"]
    with pytest.raises(SpeclabError):
        payback_hours(1800, {1: 2.0}, [{"concurrency": 1, "hours_per_day": 20}, {"concurrency": 2, "hours_per_day": 8}])


# --------------------------------------------------------------------------- the seeds' scenario


def test_seed_scenario_round_trips_through_yaml() -> None:
    text = yaml.safe_dump(SeedScenario().model_dump(mode="json"))
    again = SeedScenario.model_validate(yaml.safe_load(text))
    assert again == SeedScenario()
    with pytest.raises(ValueError):
        SeedScenario(decode_budget={"all_reduce": 0.9, "attention": 0.1, "other_gemm": 0.1, "moe_gemm": 0.2})
    with pytest.raises(ValueError, match="shares for attention"):
        SeedScenario(decode_budget={"all_reduce": 0.5, "moe_gemm": 0.2})
    with pytest.raises(ValueError, match="low <= high"):
        SeedScenario(spec_mode_overhead_ms=(3.0, 1.0))
    # the baseline step between and past the seeds' two points: linear in concurrency
    assert SeedScenario().baseline_step_s(1) == pytest.approx(1 / 82.5)
    assert SeedScenario().baseline_step_s(128) == pytest.approx(128 / 1536)


# --------------------------------------------------------------------------- notebook API on recorded runs


def test_notebook_api_on_a_recorded_pair() -> None:
    from speclab.predict.accuracy import compare_predicted_measured, compare_replay_with_server
    from speclab.predict.payback import restart_payback
    from speclab.predict.predictions import predict_from_baseline
    from speclab.predict.stepmodel import calibrate_from_runs
    from speclab.predict.timings import run_option, spec_level_points

    base, spec = DATA / "f32-baseline", DATA / "f32-ngram"
    option = run_option(spec)  # an old manifest redacted k; the launch command restores it
    assert option.num_speculative_tokens == 4 and option.prompt_lookup_min == 2

    points = spec_level_points(base, spec)
    assert list(points["level"]) == [0, 1]
    assert (points["verified_tokens_per_seq"] > 2.0).all() and (points["step_s"] > points["baseline_step_s"]).all()

    model = calibrate_from_runs(base, spec)
    assert model.verify.per_token_s > 0

    prediction = predict_from_baseline(base, option, model)
    assert {"category", "concurrency", "predicted_speedup", "predicted_tok_s",
            "break_even_acceptance_length", "acceptance_rate"} <= set(prediction.columns)
    assert set(prediction["category"]) >= {"all", "code_editing", "multi_turn"}
    by = prediction.set_index(["category", "concurrency"])
    assert by.loc[("code_editing", 1), "predicted_speedup"] > by.loc[("multi_turn", 1), "predicted_speedup"]

    replay = compare_replay_with_server(base, spec)
    assert (replay["outputs_identical"] == 1.0).all()
    assert (replay["replay_draft_tokens"] == replay["server_draft_tokens"]).all()
    assert (replay["replay_accepted"] <= replay["server_accepted"]).all()
    assert (replay["server_accepted"] <= replay["replay_accepted_max"]).all()

    table = compare_predicted_measured(base, spec)
    assert (table["cost_model_fit"] == "in-sample").all()
    all_rows = table[table["category"] == "all"]
    assert (all_rows["error_pct"].abs() < 5).all()
    assert all_rows["measured_acceptance_rate"].notna().all()

    payback = restart_payback(prediction, [{"concurrency": 1, "hours_per_day": 8}], baseline_run_dir=base)
    assert payback.iloc[-1]["restart_downtime_h"] > 0


def test_verify_cost_table_reads_the_model_in_milliseconds() -> None:
    from speclab.predict.costmodel import CalibratedStepTime, VerifyCost
    from speclab.report.tables import verify_cost_table

    base = pd.DataFrame({"batch": [1.0, 4.0], "step_s": [0.040, 0.046]})
    model = CalibratedStepTime(base, VerifyCost(overhead_s=0.0004, per_token_s=0.001, exponent=1.0, source="fit: a + b"))
    model.notes.append("verify cost fitted on 2 point(s) only")
    table = verify_cost_table(model).set_index("field")["value"]
    assert table["verify cost from"] == "fit: a + b"
    assert table["fixed cost per speculative step"] == "0.40 ms"
    assert table["extra step time at 1 / 4 / 16 extra tokens (one sequence)"] == "1.4 / 4.4 / 16.4 ms"
    assert table["knee: tokens in a step below which an extra one is nearly free"] == "1"
    assert table["baseline step time by batch"] == "1.0 seq: 40.0 ms, 4.0 seq: 46.0 ms"
    assert table["baseline slope per extra sequence"] == "2.00 ms"
    assert table["note"] == "verify cost fitted on 2 point(s) only"
