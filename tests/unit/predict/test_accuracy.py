"""Predicted against measured (speclab.predict.accuracy), on recorded float32 runs of the embedded
server: every interval and verdict, the in-sample error, the replay against the server's counters."""

from __future__ import annotations

from pathlib import Path

import pytest

from speclab.predict.accuracy import compare_predicted_measured
from speclab.predict.predictions import PREDICTED_LOSS, PREDICTED_UNCLEAR, PREDICTED_WIN
from speclab.predict.stepmodel import calibrate_from_runs

RUNS = Path(__file__).resolve().parents[2] / "data" / "predict"
BASE, SPEC = RUNS / "stream-f32-baseline", RUNS / "stream-f32-ngram"  # stream_model's runs


@pytest.fixture(scope="module")
def table():
    model = calibrate_from_runs(RUNS / "f32-baseline", RUNS / "f32-ngram")
    return compare_predicted_measured(RUNS / "f32-baseline", RUNS / "f32-ngram", cost_model=model)


def test_each_interval_brackets_its_point_and_the_verdict_follows_it(table) -> None:
    assert (table["predicted_speedup_low"] <= table["predicted_speedup"]).all()
    assert (table["predicted_speedup"] <= table["predicted_speedup_high"]).all()
    assert (table["predicted_speedup_high"] - table["predicted_speedup_low"] > 0.01).all()
    for row in table.to_dict("records"):
        expected = (PREDICTED_WIN if row["predicted_speedup_low"] > 1 else
                    PREDICTED_LOSS if row["predicted_speedup_high"] < 1 else PREDICTED_UNCLEAR)
        assert row["predicted_verdict"] == expected
    verdicts = dict(zip(zip(table["category"], table["concurrency"], strict=True), table["predicted_verdict"], strict=True))
    assert verdicts[("code_editing", 1)] == PREDICTED_WIN      # copy-heavy: n-gram wins
    assert verdicts[("multi_turn", 4)] == PREDICTED_LOSS       # little to copy: verification costs


def test_most_measurements_fall_inside_the_interval(table) -> None:
    # in-sample model on 2 prompts per cell: the interval must still hold the measurement in most cells
    assert table["within_interval"].sum() >= 8 and len(table) == 10


def test_in_sample_the_all_rows_are_predicted_within_five_percent(stream_model) -> None:
    table = compare_predicted_measured(BASE, SPEC, cost_model=stream_model)
    rows = table[table["category"] == "all"]
    assert len(rows) == 2 and (rows["error_pct"].abs() < 5).all(), rows[["concurrency", "error_pct"]]
    assert table["within_interval"].mean() >= 0.8
    assert (table["predicted_speedup_low"] < table["predicted_speedup"]).all()


def test_notebook_api_on_a_recorded_pair() -> None:
    from speclab.predict.accuracy import compare_predicted_measured, compare_replay_with_server
    from speclab.predict.payback import restart_payback
    from speclab.predict.predictions import predict_from_baseline
    from speclab.predict.stepmodel import calibrate_from_runs
    from speclab.predict.timings import run_option, spec_level_points

    base, spec = RUNS / "f32-baseline", RUNS / "f32-ngram"
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
