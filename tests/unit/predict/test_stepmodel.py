"""The step model of a run folder (speclab.predict.stepmodel), calibrated on recorded streams: a
real float32 baseline and n-gram run of the embedded server with every chunk's timing kept
(tests/data/predict/stream-f32-*, made by scripts/stream_fixture.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from speclab.options import default_option
from speclab.predict.costmodel import VerifyCost
from speclab.predict.predictions import predict_from_baseline
from speclab.predict.stepmodel import baseline_step_model, mode_costs_for_run, with_baseline_steps

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







DATA = Path(__file__).resolve().parents[2] / "data" / "predict"


def _external_vllm(tmp_path: Path, version: str = "0.32.0") -> Path:
    run = tmp_path / "external-baseline"
    shutil.copytree(DATA / "f32-baseline", run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["params"] = {**(manifest.get("params") or {}), "mode": "external"}
    manifest["server"]["version"] = version
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def test_an_external_vllm_ngram_prediction_names_the_lost_async_scheduling_and_ngram_gpu_does_not(
        tmp_path: Path) -> None:
    run = _external_vllm(tmp_path)
    costs, _ = mode_costs_for_run(run, {"ngram": 4, "ngram_gpu": 4})
    for parts in costs["ngram"].values():
        lost = next(p for p in parts if p["name"] == "async_scheduling_lost")
        assert lost["label"] in ("measured", "borrowed") and lost["high_ms"] > 0 and "vllm/config/vllm.py" in lost["source"]
    for parts in costs["ngram_gpu"].values():
        kept = next(p for p in parts if p["name"] == "async_scheduling_lost")
        assert kept["high_ms"] == 0 and kept["source"].startswith("kept")
    # and the prediction carries the parts, naming them in its row
    model = baseline_step_model(run, VerifyCost(per_token_s=0.002), source="params")
    model.mode_costs = costs
    table = predict_from_baseline(run, default_option("ngram"), model)
    every = table[table["category"] == "all"]
    assert every["mode_cost_parts"].str.contains(r"async scheduling lost [\d.]+ to [\d.]+ ms \(borrowed\)").all()
    assert every["spec_mode_overhead_ms"].str.endswith("(in parts)").all()
    gpu = predict_from_baseline(run, default_option("ngram_gpu"), model)
    assert not gpu["mode_cost_parts"].str.contains("async scheduling lost [1-9]").any()


def test_an_engine_the_table_does_not_know_is_priced_as_assumed_and_said(tmp_path: Path) -> None:
    run = _external_vllm(tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["server"]["engine"] = "unknown"
    (run / "manifest.json").write_text(json.dumps(manifest))
    costs, notes = mode_costs_for_run(run, {"ngram": 4})
    assert all(p["label"] == "assumed" for parts in costs["ngram"].values() for p in parts)
    assert any("not in the mode table" in n for n in notes)


def test_a_wider_instance_spread_widens_the_interval(tmp_path: Path) -> None:
    run = DATA / "f32-baseline"
    model = baseline_step_model(run, VerifyCost(per_token_s=0.002), source="params")
    model.spec_mode_overhead_s = (0.0, 0.0)
    widths = []
    for sd in (0.01, 0.04, 0.08):
        table = predict_from_baseline(run, default_option("ngram"), model, instance_sd=sd)
        every = table[table["category"] == "all"]
        widths.append(float((every["predicted_speedup_high"] - every["predicted_speedup_low"]).median()))
    assert widths[0] < widths[1] < widths[2]
    # the model's own spread is used when none is given
    model.instance_sd = 0.08
    own = predict_from_baseline(run, default_option("ngram"), model)
    every = own[own["category"] == "all"]
    assert float((every["predicted_speedup_high"] - every["predicted_speedup_low"]).median()) == pytest.approx(widths[2])


def test_a_measured_part_is_drawn_not_stacked() -> None:
    """A measured part of speculative mode's cost (a mean with its standard error) widens the
    interval by its own spread drawn in each resample; its ends are not stacked like an assumed range's."""
    run = DATA / "f32-baseline"
    model = baseline_step_model(run, VerifyCost(per_token_s=0.002), source="params")

    def parts(se: float | None) -> dict:
        residual = {"name": "residual", "low_ms": 2.0 - 1.645 * 3.0, "high_ms": 2.0 + 1.645 * 3.0,
                    "label": "measured" if se else "assumed", "source": "test"}
        if se:
            residual["se_ms"] = se
        return {"ngram": {1: [residual], 4: [residual]}}

    widths, points = [], []
    for se in (3.0, None):
        model.mode_costs = parts(se)
        every = predict_from_baseline(run, default_option("ngram"), model, instance_sd=0.02)
        every = every[every["category"] == "all"]
        widths.append(float((every["predicted_speedup_high"] - every["predicted_speedup_low"]).median()))
        points.append(every["predicted_speedup"].to_numpy())
    # the same mean either way; the drawn part makes a narrower interval than its ends stacked
    assert points[0] == pytest.approx(points[1], rel=1e-6)
    assert widths[0] < widths[1]
