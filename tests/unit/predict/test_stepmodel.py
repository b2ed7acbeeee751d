"""The step-level model on recorded streams: a real float32 baseline and n-gram run of the
embedded server with every chunk's timing kept (tests/data/predict/stream-f32-*, made by
scripts/stream_fixture.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from speclab.options import default_option
from speclab.predict.accuracy import compare_predicted_measured
from speclab.predict.predictions import predict_from_baseline
from speclab.predict.stepmodel import calibrate_from_runs, with_baseline_steps
from speclab.predict.timings import calibration_steps
from speclab.report.tables import verify_cost_table

DATA = Path(__file__).resolve().parents[2] / "data" / "predict"
BASE, SPEC = DATA / "stream-f32-baseline", DATA / "stream-f32-ngram"


@pytest.fixture(scope="module")
def model():
    return calibrate_from_runs(BASE, SPEC)


def test_the_calibration_reads_every_engine_step_of_both_runs(model) -> None:
    steps = model.step_data
    assert steps is not None and model.steps is not None
    usable = steps[(steps["decode_seqs"] > 0) & steps["duration_s"].notna() & steps["matched"]]
    # 8 + 8 requests of up to 128 tokens per run: hundreds of steps, not two level means
    assert model.steps.steps_fitted > 500 and len(usable) >= model.steps.steps_fitted
    spec = usable[usable["speculative"]]
    assert spec["draft_tokens"].sum() > 0 and spec["matched"].all()
    # every request's chunks matched its replayed steps: the n-gram port is vLLM's
    assert steps[steps["speculative"]]["matched"].all()
    # a speculative step costs more than a plain one, and drafts cost something
    assert model.verify.overhead_s > 0 or model.verify.per_token_s > 0
    assert model.steps.seq_step_s[-1] > model.steps.seq_step_s[0]


def test_the_fitted_model_prices_the_measured_steps(model) -> None:
    steps = model.step_data
    steps = steps[(steps["decode_seqs"] > 0) & steps["duration_s"].notna() & steps["matched"]].copy()
    steps["modelled_s"] = [model.step_seconds(r.decode_seqs, r.context_tokens, r.draft_tokens, r.prefill_tokens,
                                              speculative=r.speculative) for r in steps.itertuples()]
    means = steps.groupby(["speculative", "concurrency"])[["duration_s", "modelled_s"]].mean()
    ratio = means["duration_s"] / means["modelled_s"]
    assert ((ratio > 0.95) & (ratio < 1.05)).all(), ratio


def test_in_sample_the_all_rows_are_predicted_within_five_percent(model) -> None:
    table = compare_predicted_measured(BASE, SPEC, cost_model=model)
    rows = table[table["category"] == "all"]
    assert len(rows) == 2 and (rows["error_pct"].abs() < 5).all(), rows[["concurrency", "error_pct"]]
    assert table["within_interval"].mean() >= 0.8
    assert (table["predicted_speedup_low"] < table["predicted_speedup"]).all()


def test_the_predicted_baselines_own_steps_join_the_fit(model, tmp_path) -> None:
    other = tmp_path / "another-baseline"
    shutil.copytree(BASE, other)
    joined = with_baseline_steps(model, other)
    assert joined.steps is not None and joined.steps.steps_fitted > model.steps.steps_fitted
    assert "another-baseline" in joined.steps.source
    assert with_baseline_steps(model, BASE) is model  # already in the fit
    # a baseline recorded without chunk timing adds nothing and still predicts
    table = predict_from_baseline(DATA / "f32-baseline", default_option("ngram", 4), model)
    assert table["predicted_speedup"].notna().all()


def test_a_level_the_client_stalled_through_is_left_out(tmp_path) -> None:
    stalled = tmp_path / "stalled-ngram"
    shutil.copytree(SPEC, stalled)
    summary = json.loads((stalled / "summary.json").read_text())
    summary["levels"][1]["harness"] = {**(summary["levels"][1].get("harness") or {}), "max_s": 1.5}
    (stalled / "summary.json").write_text(json.dumps(summary))
    steps = calibration_steps(BASE, stalled)
    lost = steps[steps["speculative"] & (steps["level"] == summary["levels"][1]["level"])]
    assert len(lost) > 0 and not lost["matched"].any()


def test_the_verify_cost_table_shows_the_step_model(model) -> None:
    table = verify_cost_table(model).set_index("field")["value"]
    assert table["engine steps the model was fitted on"] == f"{model.steps.steps_fitted:,}"
    assert table["engine step time by decoding sequences (no context, no prefill)"].startswith("1 seq: ")
    assert table["per 1,000 tokens of context in a step"].endswith(" ms")
