"""Step-time models on synthetic measurements (speclab.predict.costmodel): Leviathan's formula, the
calibrated batch model and its fit, the step-level model fitted on engine steps, speedup and
break-even."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from speclab.errors import SpeclabError
from speclab.predict.costmodel import (
    CalibratedStepTime,
    StepCost,
    VerifyCost,
    best_k,
    break_even_acceptance_length,
    expected_tokens_per_step,
    fit_step_cost,
    fit_step_time,
    leviathan_speedup,
    predict_speedup,
    speedup_table,
)


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


# --------------------------------------------------------------------------- the step-level model


def _synthetic_steps(cost: StepCost, n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    seqs = rng.integers(1, 17, n)
    context = seqs * rng.integers(100, 900, n)
    speculative = rng.random(n) < 0.5
    drafts = np.where(speculative, rng.integers(0, 5, n) * seqs // 2, 0)
    prefill = np.where(rng.random(n) < 0.1, rng.integers(50, 600, n), 0)
    duration = np.array([cost.seconds(s, c, d, p, bool(sp)) for s, c, d, p, sp in
                         zip(seqs, context, drafts, prefill, speculative, strict=True)])
    duration = duration * rng.lognormal(0.0, 0.03, n)
    duration[:5] += 1.0  # five hiccups of the host
    return pd.DataFrame({"decode_seqs": seqs, "context_tokens": context, "draft_tokens": drafts,
                         "prefill_tokens": prefill, "prefills": (prefill > 0).astype(int), "duration_s": duration,
                         "matched": True, "speculative": speculative})


def test_the_step_fit_recovers_a_known_engine() -> None:
    truth = StepCost(seq_knots=[1, 2, 4, 8, 16], seq_step_s=[0.030, 0.031, 0.033, 0.036, 0.042],
                     per_context_token_s=2.5e-6, per_prefill_token_s=3.5e-4, prefill_step_s=0.008,
                     speculative=VerifyCost(overhead_s=0.003, per_token_s=0.0007))
    fitted = fit_step_cost(_synthetic_steps(truth, 4000))
    assert fitted.seq_knots == [1, 2, 4, 8, 16]
    assert fitted.seq_step_s == pytest.approx(truth.seq_step_s, rel=0.05)
    assert fitted.per_context_token_s == pytest.approx(2.5e-6, rel=0.15)
    assert fitted.per_prefill_token_s == pytest.approx(3.5e-4, rel=0.1)
    assert fitted.speculative.overhead_s == pytest.approx(0.003, rel=0.2)
    assert fitted.speculative.per_token_s == pytest.approx(0.0007, rel=0.1)
    assert fitted.speculative.knee_tokens == 1.0  # every draft token costs the same here
    assert fitted.steps_fitted <= 4000 - 5  # the hiccups were left out


def test_the_step_fit_finds_the_knee_below_which_draft_tokens_are_nearly_free() -> None:
    """Drafts beside one sequence cost little until the step holds 4 tokens; the fit picks
    that knee from its candidates, prices the rest, and keeps the knee it is told to."""
    truth = StepCost(seq_knots=[1, 2, 4, 8, 16], seq_step_s=[0.030, 0.031, 0.033, 0.036, 0.042],
                     per_context_token_s=2.5e-6, per_prefill_token_s=3.5e-4,
                     speculative=VerifyCost(overhead_s=0.001, per_token_s=0.002, knee_tokens=4.0))
    steps = _synthetic_steps(truth, 4000)
    fitted = fit_step_cost(steps)
    assert fitted.speculative.knee_tokens == 4.0
    assert fitted.speculative.per_token_s == pytest.approx(0.002, rel=0.1)
    # one sequence verifying two drafts (3 tokens, under the knee) pays no draft cost
    assert fitted.seconds(1, 0, 2, 0, True) - fitted.seconds(1) == pytest.approx(0.001, abs=0.0005)
    forced = fit_step_cost(steps, knee_tokens=1.0)
    assert forced.speculative.knee_tokens == 1.0
    # with the knee forced to 1, the single-sequence steps are priced dearer than they are
    assert forced.seconds(1, 0, 2, 0, True) > fitted.seconds(1, 0, 2, 0, True) + 0.001


def test_without_speculative_steps_the_speculative_part_is_zero_and_too_few_steps_are_refused() -> None:
    truth = StepCost(seq_knots=[1, 4], seq_step_s=[0.02, 0.03])
    steps = _synthetic_steps(truth, 200)
    baseline_only = steps[~steps["speculative"]]
    fitted = fit_step_cost(baseline_only)
    assert fitted.speculative.overhead_s == 0.0 and fitted.speculative.per_token_s == 0.0
    with pytest.raises(Exception, match="chunk_offsets_s"):
        fit_step_cost(baseline_only.head(5))


def test_a_step_model_prices_a_step_from_what_it_holds() -> None:
    cost = StepCost(seq_knots=[1, 8], seq_step_s=[0.010, 0.024], per_context_token_s=1e-6,
                    per_prefill_token_s=1e-4, prefill_step_s=0.002,
                    speculative=VerifyCost(overhead_s=0.001, per_token_s=0.0005))
    assert cost.seconds(1) == pytest.approx(0.010)
    assert cost.seconds(4.5) == pytest.approx(0.017)  # between the knots
    assert cost.seconds(16) == pytest.approx(0.040)  # past the last knot, along the last segment
    assert cost.seconds(2, context_tokens=1000, prefill_tokens=100) == pytest.approx(0.012 + 0.001 + 0.002 + 0.01)
    assert cost.seconds(2, draft_tokens=6, speculative=True) == pytest.approx(0.012 + 0.001 + 0.003)
    assert cost.seconds(2, draft_tokens=6) == pytest.approx(0.012)  # drafts cost nothing with speculation off
    with pytest.raises(ValueError):
        StepCost(seq_knots=[1, 2], seq_step_s=[0.01])
