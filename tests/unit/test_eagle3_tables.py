"""03's tables: offline per-position counts pooled per category; counter rates pooled per run."""

from __future__ import annotations

import pandas as pd
import pytest

from speclab.eagle3.workbook import measured_acceptance, offline_table
from speclab.runfolder import RunData


def test_offline_counts_pool_rows_per_category_and_overall() -> None:
    samples = [
        {"id": "a", "category": "code", "rows": 10, "accepted_per_pos": [8, 6, 3]},
        {"id": "b", "category": "code", "rows": 30, "accepted_per_pos": [12, 6, 3]},
        {"id": "c", "category": "chat", "rows": 10, "accepted_per_pos": [2, 1, 0]},
    ]
    table = offline_table(samples).set_index("category")
    assert table.loc["code", "position_0_rate"] == pytest.approx(20 / 40)
    assert table.loc["code", "position_2_rate"] == pytest.approx(6 / 40)
    assert table.loc["all", "rows"] == 50
    assert table.loc["all", "mean_acceptance_length"] == pytest.approx(1 + 22 / 50 + 13 / 50 + 6 / 50)


def test_measured_acceptance_weights_levels_by_their_drafts() -> None:
    levels = pd.DataFrame({"server_counters": [{"d_drafts": 100, "d_accepted_per_position": [50, 20]},
                                               {"d_drafts": 300, "d_accepted_per_position": [90, 30]}, None]})
    run = RunData(path=__import__("pathlib").Path("."), manifest={}, requests=pd.DataFrame(), levels=levels)
    row = measured_acceptance(run).iloc[0]
    assert row["position_0_rate"] == pytest.approx((50 + 90) / 400)
    assert row["mean_acceptance_length"] == pytest.approx(1 + 0.35 + 0.125)


def test_predicted_speedup_follows_acceptance_verify_cost_and_draft_time(tmp_path) -> None:
    """With an explicit verify cost, speedup = L x T(B,1) / (T(B,1) + extra(B*k) + k x draft)."""
    import json
    import shutil
    from pathlib import Path

    from speclab.eagle3.workbook import predict_speedups, predicted_vs_measured_speedup
    from speclab.predict.predictions import level_timings

    base = tmp_path / "baseline"
    shutil.copytree(Path(__file__).resolve().parents[1] / "data" / "predict" / "f32-baseline", base)
    (base / "cost_model.json").write_text(json.dumps(
        {"source": "explicit", "verify": {"overhead_s": 0.002, "per_token_s": 0.001, "exponent": 1.0}}))
    predicted = pd.DataFrame([{"category": "all", "mean_acceptance_length": 2.0}])
    table = predict_speedups(base, predicted, k=3, draft_step_s={"1": 0.001, "16": 0.004})
    timings = level_timings(base).drop_duplicates("concurrency").set_index("concurrency")
    for row in table.to_dict("records"):
        batch = timings.loc[row["concurrency"], "batch"]
        t1 = timings.loc[row["concurrency"], "tpot_s"]
        draft = 3 * (0.001 + (0.003 * (min(max(batch, 1), 16) - 1) / 15))
        expected = 2.0 * t1 / (t1 + 0.002 + 0.001 * batch * 3 + draft)
        assert row["predicted_speedup"] == pytest.approx(expected, rel=0.02)
    measured = pd.DataFrame([{"category": "all", "concurrency": int(table["concurrency"].iloc[0]),
                              "speedup": 1.0, "ci_low": 0.9, "ci_high": 1.1, "verdict": "no difference"}])
    both = predicted_vs_measured_speedup(table, measured)
    assert len(both) == 1 and both["error_pct"].iloc[0] == pytest.approx(100 * (both["predicted_speedup"].iloc[0] - 1))
