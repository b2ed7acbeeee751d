"""The predicted day of a production log (speclab.traffic.day): concurrency from timestamps, each
bin's mix, hours saved and payback."""

from __future__ import annotations

import pandas as pd
import pytest

from speclab.errors import SpeclabError
from speclab.predict.costmodel import predict_speedup
from speclab.traffic.day import concurrency_profile, given_cost_model, length_bucket, predict_day
from tests.unit.helpers import COST


def _requests(rows: list[dict]) -> pd.DataFrame:
    base = {"option": "ngram k=2 (2..4)", "method": "ngram", "k": 2, "tenant": "t", "category": "c",
            "prompt_tokens": 10, "decode_steps": 10, "decode_tokens": 15, "drafts": 8, "draft_tokens": 16,
            "accepted_tokens": 5, "draft_tokens_past_output": 0, "accepted_pos1": 4, "accepted_pos2": 1}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_concurrency_profile_sums_overlaps_per_bin() -> None:
    frame = _requests([
        {"timestamp_s": 0.0, "duration_s": 50.0, "output_tokens": 16},
        {"timestamp_s": 80.0, "duration_s": 140.0, "output_tokens": 16},  # 20 s, 100 s, 20 s in three bins
        {"timestamp_s": 150.0, "duration_s": 10.0, "output_tokens": 16},
        {"timestamp_s": 320.0, "duration_s": None, "output_tokens": 11},  # estimated: 11 tokens x 2 s
    ])
    profile, notes = concurrency_profile(frame, bin_s=100.0, default_step_s=2.0)
    assert profile["bin"].tolist() == [0, 1, 2, 3]
    assert profile["concurrency"].round(6).tolist() == [0.7, 1.1, 0.2, 0.22]
    assert profile["requests"].tolist() == [2, 1, 0, 1]
    assert any("estimated" in n for n in notes)
    with pytest.raises(SpeclabError, match="duration"):
        concurrency_profile(frame, bin_s=100.0)


def test_day_prediction_uses_each_bins_mix_and_the_payback_rule() -> None:
    model = given_cost_model(COST)
    frame = _requests([
        {"timestamp_s": 0.0, "duration_s": 900.0, "output_tokens": 16},
        {"timestamp_s": 900.0, "duration_s": 1800.0, "output_tokens": 16, "accepted_tokens": 12,
         "decode_steps": 4, "decode_tokens": 15},
    ])
    day = predict_day(frame, model, load_time_s=3600.0, bin_s=900.0)
    bins = day.per_bin.set_index("bin")
    assert bins["concurrency"].tolist() == [1.0, 1.0, 1.0]
    first = predict_speedup(model, 1.0, 15 / 10, (10 + 16) / 10)
    assert bins.loc[0, "predicted_speedup"] == pytest.approx(first["speedup"])
    second = predict_speedup(model, 1.0, 15 / 4, (4 + 16) / 4)
    assert bins.loc[1, "predicted_speedup"] == pytest.approx(second["speedup"])
    assert bins.loc[2, "predicted_speedup"] == pytest.approx(
        predict_speedup(model, 1.0, 30 / 14, (14 + 32) / 14)["speedup"])  # no arrivals: the whole log's mix
    row = day.per_option.iloc[0]
    hours = 0.25 * 24 / 0.75
    freed = sum(hours * (1 - 1 / s) for s in bins["predicted_speedup"])
    assert row["server_hours_saved_per_day"] == pytest.approx(freed)
    assert row["payback_hours"] == pytest.approx(1.0 / (freed / 24))
    assert any("scale" in n for n in day.notes)


def test_length_buckets_are_ordered() -> None:
    labels = length_bucket(pd.Series([1, 70, 5000, 64]))
    assert labels.astype(str).tolist() == ["0-63", "64-127", "4096+", "64-127"]


def test_given_cost_model_needs_its_fields() -> None:
    with pytest.raises(SpeclabError, match="baseline"):
        given_cost_model({"verify": {}})


def test_idle_hours_count_in_the_span_of_the_day() -> None:
    frame = _requests([{"timestamp_s": 0.0, "duration_s": 1800.0, "output_tokens": 16},
                       {"timestamp_s": 5 * 3600.0, "duration_s": 1800.0, "output_tokens": 16}])
    day = predict_day(frame, given_cost_model(COST), load_time_s=3600.0, bin_s=1800.0)
    assert day.span_hours == 5.5 and day.profile["bin"].tolist() == [0, 10]
    assert day.per_option.iloc[0]["day_mean_concurrency"] == pytest.approx(2 * 0.5 / 5.5)
