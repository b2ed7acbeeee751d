"""Engine steps read back from streamed chunks, and the step model fitted on them."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from speclab.predict.costmodel import StepCost, VerifyCost, fit_step_cost
from speclab.predict.steptrace import StepPlan, level_steps, run_steps


def _record(request_id: str, send: float, prompt: int, at: list[float], tokens: list[int] | None = None,
            level: int = 0) -> dict:
    return {"request_id": request_id, "level": level, "concurrency": 2, "send_time_s": send, "prompt_tokens": prompt,
            "chunk_offsets_s": [t - send for t in at], "chunk_tokens": tokens or [1] * len(at), "ok": True}


# two requests at concurrency 2: r2 arrives while r1 decodes, and its prefill shares r1's third step
R1 = _record("r1", 0.0, 10, [0.10, 0.20, 0.30, 0.40])
R2 = _record("r2", 0.15, 50, [0.3003, 0.4002, 0.50])


def test_chunks_cluster_into_steps_with_who_decoded_and_who_was_prefilled() -> None:
    steps = level_steps([R1, R2])
    assert steps["end_s"].round(2).tolist() == [0.10, 0.20, 0.30, 0.40, 0.50]
    assert math.isnan(steps["duration_s"].iloc[0])
    assert steps["duration_s"].iloc[1:].round(3).tolist() == [0.1, 0.1, 0.1, 0.1]
    assert steps["decode_seqs"].tolist() == [0, 1, 1, 2, 1]
    assert steps["prefills"].tolist() == [1, 0, 1, 0, 0]
    assert steps["prefill_tokens"].tolist() == [10, 0, 50, 0, 0]
    # context: the prompt and every token emitted before the step
    assert steps["context_tokens"].tolist() == [0, 11, 12, 13 + 51, 52]
    assert steps["matched"].all()


def test_a_speculative_runs_drafts_are_matched_chunk_by_chunk() -> None:
    spec_r1 = _record("r1", 0.0, 10, [0.10, 0.20, 0.30], [1, 3, 1])
    plans = {"r1": StepPlan([4, 2], [3, 1])}
    steps = level_steps([spec_r1], plans)
    assert steps["draft_tokens"].tolist() == [0, 4, 2]
    assert steps["emitted_tokens"].tolist() == [0, 3, 1]
    assert steps["context_tokens"].tolist() == [0, 11, 14]
    assert steps["matched"].all()
    # a replay that disagrees with what the stream carried is not trusted for those steps
    wrong = level_steps([spec_r1], {"r1": StepPlan([4, 2], [2, 2])})
    assert not wrong["matched"].any()


def test_merged_chunks_of_a_baseline_are_not_trusted() -> None:
    merged = _record("r1", 0.0, 10, [0.10, 0.20, 0.40], [1, 1, 2])
    assert not level_steps([merged])["matched"].any()


def test_a_client_stall_reads_a_burst_that_is_not_taken_for_engine_steps() -> None:
    # steps every 0.1 s, then the client stalls: four chunks queue up and are read at 1.0 s
    at = [0.1, 0.2, 0.3, 0.4, 1.0, 1.0001, 1.0002, 1.0003, 1.1, 1.2]
    steps = level_steps([_record("r1", 0.0, 10, at)])
    assert len(steps) == len(at)  # one request: every chunk is a step of its own
    flagged = steps.loc[~steps["matched"], "end_s"].round(4).tolist()
    assert flagged == [1.0, 1.0001, 1.0002, 1.0003]
    assert steps.loc[steps["matched"], "duration_s"].dropna().round(3).tolist() == [0.1, 0.1, 0.1, 0.1, 0.1]


def test_run_steps_reads_every_level_and_skips_failed_requests() -> None:
    failed = {**_record("bad", 0.0, 5, [0.05, 0.07]), "ok": False}
    other = _record("r3", 0.0, 5, [0.1, 0.2], level=1)
    steps = run_steps([R1, R2, failed, other])
    assert steps.groupby("level").size().to_dict() == {0: 5, 1: 2}


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
