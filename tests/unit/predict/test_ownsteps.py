"""The split of a speculative run's own steps into a draft token's price and speculative
mode's own cost (speclab.predict.ownsteps), on steps whose costs are known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from speclab.predict.ownsteps import MIN_STEPS, OWN_STEP_COLUMNS, overhead_range, own_step_parts


def _steps(rng: np.random.Generator, *, mode_ms: dict[int, float], token_ms: dict[int, float],
           n: int = 400) -> pd.DataFrame:
    """Baseline and speculative steps at each concurrency: 70 ms + 4 ms a sequence + 10 ms per 1k
    tokens of context, plus, in speculative mode, ``mode_ms`` a step and ``token_ms`` per draft
    token; 0.5 ms of noise and one host hiccup in each arm."""
    rows = []
    for c in mode_ms:
        for speculative in (False, True):
            context = rng.integers(100 * c, 400 * c, n)
            drafts = rng.choice([0, 0, 1, 2, 4 * c], n) if speculative else np.zeros(n, int)
            ms = 70 + 4 * c + 0.01 * context + rng.normal(0, 0.5, n)
            if speculative:
                ms = ms + mode_ms[c] + token_ms[c] * drafts
            ms[0] += 400  # a hiccup of the host: trimmed, never fitted
            rows.append(pd.DataFrame({
                "level": c, "concurrency": c, "step": np.arange(n), "duration_s": ms / 1e3, "decode_seqs": c,
                "context_tokens": context, "prefills": 0, "prefill_tokens": 0, "draft_tokens": drafts,
                "matched": True, "speculative": speculative}))
    return pd.concat(rows, ignore_index=True)


def test_recovers_the_price_of_a_draft_token_and_the_cost_of_speculative_mode() -> None:
    steps = _steps(np.random.default_rng(1), mode_ms={1: -12.0, 4: 5.0}, token_ms={1: 6.0, 4: 3.5})
    parts = own_step_parts("unused", "unused", steps=steps)
    assert list(parts.columns) == list(OWN_STEP_COLUMNS)
    assert parts["concurrency"].tolist() == [1, 4]
    one, four = parts.iloc[0], parts.iloc[1]
    assert one["spec_mode_cost_ms"] == pytest.approx(-12.0, abs=0.3)
    assert four["spec_mode_cost_ms"] == pytest.approx(5.0, abs=0.3)
    assert one["draft_token_ms"] == pytest.approx(6.0, abs=0.1)
    assert four["draft_token_ms"] == pytest.approx(3.5, abs=0.1)
    # at the baseline's own mean context: 70 + 4 + 10 ms per 1k tokens
    assert one["baseline_step_ms"] == pytest.approx(74 + 0.01 * one["context_tokens_mean"], abs=0.2)
    assert 0 < one["spec_mode_cost_se_ms"] < 0.3
    low, high = overhead_range(parts)
    assert low == pytest.approx(-12.0 - 2 * one["spec_mode_cost_se_ms"], abs=0.11)
    assert high == pytest.approx(5.0 + 2 * four["spec_mode_cost_se_ms"], abs=0.11)
    assert low < -12.0 < 5.0 < high


def test_steps_with_a_prefill_or_unmatched_are_left_out() -> None:
    steps = _steps(np.random.default_rng(2), mode_ms={1: 2.0}, token_ms={1: 5.0})
    spoiled = steps.index[steps["speculative"]][:100]
    steps.loc[spoiled, "duration_s"] += 0.2  # a prefill stalls the step by far more than either term
    steps.loc[spoiled[:50], "prefill_tokens"] = 300
    steps.loc[spoiled[50:], "matched"] = False
    parts = own_step_parts("unused", "unused", steps=steps)
    assert parts.iloc[0]["spec_mode_cost_ms"] == pytest.approx(2.0, abs=0.3)
    assert parts.iloc[0]["spec_steps"] == 300


def test_a_concurrency_without_enough_steps_or_drafts_gives_no_row() -> None:
    steps = _steps(np.random.default_rng(3), mode_ms={1: 0.0, 8: 0.0}, token_ms={1: 5.0, 8: 5.0})
    few = steps[(steps["concurrency"] == 8) & steps["speculative"]].index[MIN_STEPS - 1:]
    steps = steps.drop(few)
    parts = own_step_parts("unused", "unused", steps=steps)
    assert parts["concurrency"].tolist() == [1]
    assert overhead_range(parts.iloc[0:0]) is None


def test_a_run_that_never_drafted_gives_the_mode_cost_and_no_price() -> None:
    steps = _steps(np.random.default_rng(4), mode_ms={1: -5.0}, token_ms={1: 5.0})
    steps.loc[steps["speculative"], "duration_s"] -= steps.loc[steps["speculative"], "draft_tokens"] * 0.005
    steps.loc[steps["speculative"], "draft_tokens"] = 0  # n-gram that never found a match
    parts = own_step_parts("unused", "unused", steps=steps)
    assert parts.iloc[0]["spec_mode_cost_ms"] == pytest.approx(-5.0, abs=0.3)
    assert np.isnan(parts.iloc[0]["draft_token_ms"])


RUNS = __import__("pathlib").Path(__file__).resolve().parents[2] / "data" / "predict"


def test_recorded_runs_split_into_a_price_and_a_small_mode_cost() -> None:
    """Real float32 runs of the embedded server (the 2-core AVX-512 host of docs/predictor.md):
    there speculative mode cost 1-3 ms a step, inside the stated default range."""
    parts = own_step_parts(RUNS / "stream-f32-baseline", RUNS / "stream-f32-ngram")
    assert parts["concurrency"].tolist() == [1, 4]
    assert parts["spec_steps"].min() >= MIN_STEPS
    assert parts["spec_mode_cost_ms"].between(0.5, 3.0).all()
    assert parts["draft_token_ms"].between(1.0, 3.0).all()
    assert (parts["draft_token_ms"] > 10 * parts["draft_token_se_ms"]).all()
