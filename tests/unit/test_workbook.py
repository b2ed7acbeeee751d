"""The notebooks' steps (speclab.workbook): 01's predictions in parts, from a 00-profile run of the same
server (a recorded CPU trace), and 02's inputs checked before any run folder is made."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from speclab import workbook as wb
from speclab.params import BaselineParams
from speclab.predict.costmodel import VerifyCost
from speclab.predict.stepmodel import baseline_step_model
from speclab.profiling import analyse_profile
from speclab.runs import Run

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
RUNS = Path(__file__).resolve().parents[1] / "data" / "predict"


def test_a_profile_run_splits_each_predicted_speedup_into_labelled_parts(tmp_path: Path) -> None:
    run = Run.create("00-profile", {"option": "baseline"}, kind="00-profile", outputs_root=tmp_path)
    analyse_profile(TRACES / "vllm-cpu-ngram").save(run.path)
    predicted = pd.DataFrame({"option": ["ngram k=4"] * 2, "category": ["all"] * 2, "concurrency": [1, 4],
                              "tokens_per_step": [2.0, 1.6], "verified_tokens_per_seq": [5.0, 4.2]})
    params = BaselineParams.validate_values({"profile_run": str(run.path), "spec_mode_overhead_ms": [1.0, 2.0]})
    model = baseline_step_model(RUNS / "f32-baseline", VerifyCost(per_token_s=0.002), source="params")
    model.spec_mode_overhead_s = (1e-3, 2e-3)  # the range given: one part, stated
    parts = wb.prediction_parts(params, predicted, model)
    assert set(parts["concurrency"]) == {1, 4}
    for c, rows in parts.groupby("concurrency"):
        first, last = rows.iloc[0], rows.iloc[-1]
        assert first["part"] == "acceptance" and first["speedup_after"] == pytest.approx(2.0 if c == 1 else 1.6)
        # the parts add up exactly to the prediction, each labelled how it is known
        assert last["part"] == "spec_mode_overhead" and last["label"] == "assumed"
        assert last["speedup_after"] == pytest.approx(first["speedup_after"] + rows["speedup_change"].iloc[1:].sum())
        assert set(rows["label"]) <= {"measured", "fitted", "borrowed", "assumed"}
        assert last["extra_ms"] == pytest.approx(1.5)  # the middle of the stated range
    # on this CPU the GEMMs' growth with tokens costs more than attention's at concurrency 4
    at4 = parts[parts["concurrency"] == 4].set_index("part")["speedup_change"]
    assert at4["other_gemm"] < at4["attention"] < 0
    assert wb.prediction_parts(BaselineParams.validate_values({}), predicted, model).empty


def test_a_run_to_learn_from_is_checked_before_any_run_folder_is_made(tmp_path) -> None:
    from speclab.errors import SpeclabError
    from speclab.params import SpecParams
    from speclab.workbook import check_notebook_inputs

    params = SpecParams.validate_values({"baseline_run": str(RUNS / "stream-f32-baseline"),
                                         "spec_mode_overhead_from": str(tmp_path / "gone")})
    with pytest.raises(SpeclabError, match="spec_mode_overhead_from: .* is not a finished 02-ngram run"):
        check_notebook_inputs(params)
    check_notebook_inputs(params.model_copy(update={"spec_mode_overhead_from": str(RUNS / "stream-f32-ngram")}))
