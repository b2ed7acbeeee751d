"""Every prediction carries an interval, and the verdict reads it (recorded float32 runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from speclab.predict.accuracy import compare_predicted_measured
from speclab.predict.predictions import PREDICTED_LOSS, PREDICTED_UNCLEAR, PREDICTED_WIN
from speclab.predict.stepmodel import calibrate_from_runs

RUNS = Path(__file__).resolve().parents[2] / "data" / "predict"


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
