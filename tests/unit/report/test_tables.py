"""Tables read from run folders (speclab.report.tables): payback as a production team gives it,
the verify cost in milliseconds, and identities without local paths."""

from __future__ import annotations

import math

import pandas as pd

from speclab.params import BaselineParams
from speclab.report import tables
from speclab.report.tables import verify_cost_table
from tests.unit.report.helpers import run_data as _run

EXTERNAL = {"mode": "external", "endpoint": "http://gpu-box:8000/v1", "verify_cost": "baseline_slope"}


def _predicted() -> pd.DataFrame:
    return pd.DataFrame({"option": ["ngram k=4"] * 2, "category": ["all"] * 2, "concurrency": [1, 4],
                         "predicted_speedup": [1.5, 1.2]})


def test_an_external_server_without_restart_minutes_gets_a_payback_row_saying_what_to_give() -> None:
    params = BaselineParams.validate_values(EXTERNAL)
    table = tables.payback_table(_run([]), params.traffic, params.restart_minutes, _predicted())
    assert list(table.columns) == ["note"]
    assert "restart_minutes" in table["note"].iloc[0]


def test_restart_minutes_prices_the_payback_and_beats_a_measured_load_time() -> None:
    params = BaselineParams.validate_values({**EXTERNAL, "restart_minutes": 30,
                                             "traffic": [{"concurrency": 1, "hours_per_day": 24}]})
    table = tables.payback_table(_run([], server={"load_time_s": 40.0}), params.traffic, params.restart_minutes,
                                 _predicted())
    total = table.dropna(subset=["payback_hours"]).iloc[0]
    # 30 min of downtime; 24 h a day at 1.5x frees 8 server-hours a day: 0.5 / (8/24) = 1.5 h
    assert math.isclose(total["payback_hours"], 1.5)
    assert set(table["restart_from"]) == {"restart_minutes (given)"}
    measured = tables.payback_table(_run([], server={"load_time_s": 36.0}),
                                    [{"concurrency": 1, "hours_per_day": 24}], None, _predicted())
    assert math.isclose(measured.dropna(subset=["payback_hours"]).iloc[0]["payback_hours"], 0.03)


def test_verify_cost_table_reads_the_model_in_milliseconds() -> None:
    from speclab.predict.costmodel import CalibratedStepTime, VerifyCost
    from speclab.report.tables import verify_cost_table

    base = pd.DataFrame({"batch": [1.0, 4.0], "step_s": [0.040, 0.046]})
    model = CalibratedStepTime(base, VerifyCost(overhead_s=0.0004, per_token_s=0.001, exponent=1.0, source="fit: a + b"))
    model.notes.append("verify cost fitted on 2 point(s) only")
    table = verify_cost_table(model).set_index("field")["value"]
    assert table["verify cost from"] == "fit: a + b"
    assert table["fixed cost per speculative step"] == "0.40 ms"
    assert table["extra step time at 1 / 4 / 16 extra tokens (one sequence)"] == "1.4 / 4.4 / 16.4 ms"
    assert table["knee: tokens in a step below which an extra one is nearly free"] == "1"
    assert table["baseline step time by batch"] == "1.0 seq: 40.0 ms, 4.0 seq: 46.0 ms"
    assert table["baseline slope per extra sequence"] == "2.00 ms"
    assert table["note"] == "verify cost fitted on 2 point(s) only"


def test_the_verify_cost_table_shows_the_step_model(stream_model) -> None:
    table = verify_cost_table(stream_model).set_index("field")["value"]
    assert table["engine steps the model was fitted on"] == f"{stream_model.steps.steps_fitted:,}"
    assert table["engine step time by decoding sequences (no context, no prefill)"].startswith("1 seq: ")
    assert table["per 1,000 tokens of context in a step"].endswith(" ms")


def test_the_identity_table_cuts_local_paths_for_every_notebook() -> None:
    from speclab.report.tables import identity_table
    from speclab.runfolder import ServerIdentity

    ident = ServerIdentity(endpoint="http://127.0.0.1:8000/v1", launch_command=(
        "LD_PRELOAD=/usr/lib/libtcmalloc_minimal.so.4:/home/me/speclab/.venv-server/lib/libiomp5.so "
        "vllm serve /home/me/.cache/speclab/smollm2-135m --profiler-config "
        '{"torch_profiler_dir":"/tmp/run/profiles"}'), notes=["server log: /tmp/run/server.log"])
    shown = identity_table(ident).to_string()
    assert "/home/me" not in shown and "/tmp/run" not in shown
    assert "…/smollm2-135m" in shown and "…/server.log" in shown and "http://127.0.0.1:8000/v1" in shown
    assert "/home/me/.cache" in identity_table(ident, shareable=False).to_string()
