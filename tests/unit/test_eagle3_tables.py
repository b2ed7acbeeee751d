"""03's tables: offline per-position counts pooled per category; counter rates pooled per run."""

from __future__ import annotations

import pandas as pd
import pytest

from speclab.runfolder import RunData
from speclab.workbook_eagle3 import measured_acceptance, offline_table


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
