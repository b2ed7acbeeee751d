"""The step model of a run folder (speclab.predict.stepmodel), calibrated on recorded streams: a
real float32 baseline and n-gram run of the embedded server with every chunk's timing kept
(tests/data/predict/stream-f32-*, made by scripts/stream_fixture.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from speclab.options import default_option
from speclab.predict.predictions import predict_from_baseline
from speclab.predict.stepmodel import with_baseline_steps

RUNS = Path(__file__).resolve().parents[2] / "data" / "predict"
BASE = RUNS / "stream-f32-baseline"  # stream_model's baseline


def test_the_calibration_reads_every_engine_step_of_both_runs(stream_model) -> None:
    steps = stream_model.step_data
    assert steps is not None and stream_model.steps is not None
    usable = steps[(steps["decode_seqs"] > 0) & steps["duration_s"].notna() & steps["matched"]]
    # 8 + 8 requests of up to 128 tokens per run: hundreds of steps, not two level means
    assert stream_model.steps.steps_fitted > 500 and len(usable) >= stream_model.steps.steps_fitted
    spec = usable[usable["speculative"]]
    assert spec["draft_tokens"].sum() > 0 and spec["matched"].all()
    # every request's chunks matched its replayed steps: the n-gram port is vLLM's
    assert steps[steps["speculative"]]["matched"].all()
    # a speculative step costs more than a plain one, and drafts cost something
    assert stream_model.verify.overhead_s > 0 or stream_model.verify.per_token_s > 0
    assert stream_model.steps.seq_step_s[-1] > stream_model.steps.seq_step_s[0]


def test_the_fitted_model_prices_the_measured_steps(stream_model) -> None:
    steps = stream_model.step_data
    steps = steps[(steps["decode_seqs"] > 0) & steps["duration_s"].notna() & steps["matched"]].copy()
    steps["modelled_s"] = [stream_model.step_seconds(r.decode_seqs, r.context_tokens, r.draft_tokens,
                                                     r.prefill_tokens, speculative=r.speculative)
                           for r in steps.itertuples()]
    means = steps.groupby(["speculative", "concurrency"])[["duration_s", "modelled_s"]].mean()
    ratio = means["duration_s"] / means["modelled_s"]
    assert ((ratio > 0.95) & (ratio < 1.05)).all(), ratio


def test_the_predicted_baselines_own_steps_join_the_fit(stream_model, tmp_path) -> None:
    other = tmp_path / "another-baseline"
    shutil.copytree(BASE, other)
    joined = with_baseline_steps(stream_model, other)
    assert joined.steps is not None and joined.steps.steps_fitted > stream_model.steps.steps_fitted
    assert "another-baseline" in joined.steps.source
    assert with_baseline_steps(stream_model, BASE) is stream_model  # already in the fit
    # a baseline recorded without chunk timing adds nothing and still predicts
    table = predict_from_baseline(RUNS / "f32-baseline", default_option("ngram", 4), stream_model)
    assert table["predicted_speedup"].notna().all()


def test_learning_from_a_run_that_is_not_a_finished_02_run_is_refused(tmp_path) -> None:
    from speclab.errors import SpeclabError
    from speclab.predict.costmodel import VerifyCost
    from speclab.predict.stepmodel import baseline_step_model, learn_overhead
    from speclab.runfolder import load_run

    model = baseline_step_model(RUNS / "stream-f32-baseline", VerifyCost(per_token_s=0.002), source="given")
    model.spec_mode_overhead_s = (0.0005, 0.003)
    option = load_run(RUNS / "stream-f32-ngram")
    with pytest.raises(SpeclabError, match="is not a finished 02-ngram run"):
        learn_overhead(model, tmp_path, option)
    with pytest.raises(SpeclabError, match="this very run"):
        learn_overhead(model, RUNS / "stream-f32-ngram", option)
    with pytest.raises(SpeclabError, match="names no baseline run that still exists"):
        learn_overhead(model, RUNS / "f32-ngram", option)
