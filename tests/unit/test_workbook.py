"""01's predictions in parts, from a 00-profile run of the same server (a recorded CPU trace)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from speclab import workbook as wb
from speclab.params import BaselineParams
from speclab.profiling import analyse_profile
from speclab.runs import Run

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


def test_a_profile_run_splits_each_predicted_speedup_into_labelled_parts(tmp_path: Path) -> None:
    run = Run.create("00-profile", {"option": "baseline"}, kind="00-profile", outputs_root=tmp_path)
    analyse_profile(TRACES / "vllm-cpu-ngram").save(run.path)
    predicted = pd.DataFrame({"option": ["ngram k=4"] * 2, "category": ["all"] * 2, "concurrency": [1, 4],
                              "tokens_per_step": [2.0, 1.6], "verified_tokens_per_seq": [5.0, 4.2]})
    params = BaselineParams.validate_values({"profile_run": str(run.path), "spec_mode_overhead_ms": [1.0, 2.0]})
    parts = wb.prediction_parts(params, predicted)
    assert set(parts["concurrency"]) == {1, 4}
    for c, rows in parts.groupby("concurrency"):
        first, last = rows.iloc[0], rows.iloc[-1]
        assert first["part"] == "acceptance" and first["speedup_after"] == pytest.approx(2.0 if c == 1 else 1.6)
        # the parts add up exactly to the prediction, each labelled how it is known
        assert last["part"] == "spec_mode_overhead" and last["label"] == "borrowed"
        assert last["speedup_after"] == pytest.approx(first["speedup_after"] + rows["speedup_change"].iloc[1:].sum())
        assert set(rows["label"]) <= {"measured", "fitted", "borrowed", "assumed"}
        assert last["extra_ms"] == pytest.approx(1.5)  # the middle of the stated range
    # on this CPU the GEMMs' growth with tokens costs more than attention's at concurrency 4
    at4 = parts[parts["concurrency"] == 4].set_index("part")["speedup_change"]
    assert at4["other_gemm"] < at4["attention"] < 0
    assert wb.prediction_parts(BaselineParams.validate_values({}), predicted).empty
