"""No silent path: every place where speclab once dropped, pooled or extrapolated quietly now
says so where the number is shown (a caveat with a kind, a marked row, a note) or refuses."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from speclab.errors import SpeclabError
from speclab.measure.probe import check_point
from speclab.measure.summary import summarise_level
from speclab.predict import payback
from speclab.report import caveats, decision, tables
from speclab.report.caveats import Kind
from speclab.runfolder import ProbePoint, RequestRecord, RunData, append_point, read_points

DATA = Path(__file__).resolve().parent.parent / "data" / "predict"


def _run(levels: list[dict], params: dict | None = None, status: str = "ok", path: str = "2026-12-04/101500-01-baseline",
         server: dict | None = None) -> RunData:
    return RunData(Path(path), {"status": status, "server": server or {}, "params": params or {}}, pd.DataFrame(),
                   pd.DataFrame(levels))


def test_payback_beyond_the_sweep_is_marked_not_extrapolated() -> None:
    table = payback.payback_hours(1800, {1: 1.5, 32: 0.9}, [{"concurrency": 1, "hours_per_day": 2},
                                                            {"concurrency": 128, "hours_per_day": 6}])
    row = table[table["concurrency"] == 128].iloc[0]
    assert pd.isna(row["speedup"]) and row["judged"].startswith("beyond the sweep (measured 1 to 32)")
    total = table.iloc[-1]
    assert total["judged"] == "2 of 8 h a day (the rest beyond the sweep)"
    assert total["payback_hours"] == pytest.approx(0.5 / (2 * (1 - 1 / 1.5) / 24))
    # and the run's caveats say it where the figures are read
    run = _run([{"concurrency": 1}, {"concurrency": 32}], params={"traffic": [
        {"concurrency": 1, "hours_per_day": 2}, {"concurrency": 128, "hours_per_day": 6}]})
    found = [c for c in caveats.caveats([run]) if c.kind is Kind.BEYOND_SWEEP]
    assert found and "128 (6 h a day) lies beyond the sweep (1-32)" in found[0].message


def test_a_report_never_flags_its_own_run_as_running_but_flags_another_unfinished_one() -> None:
    mine = _run([], status="running")
    assert not caveats.caveats([mine], own_run=mine.path)
    other = caveats.caveats([mine])
    assert [c.kind for c in other] == [Kind.RUN_UNFINISHED] and "still running" in other[0].message
    failed = caveats.caveats([_run([], status="failed")])
    assert [c.kind for c in failed] == [Kind.RUN_FAILED]


def test_load_shortfalls_take_the_lowest_load_by_number_not_by_text() -> None:
    a = _run([{"concurrency": 32, "inflight_mean": 27.4, "inflight_below_target": True}])
    b = _run([{"concurrency": 32, "inflight_mean": 9.5, "inflight_below_target": True}])
    # as text "27.4 ..." < "9.5 ...", so a minimum of strings kept the lighter-looking one
    assert caveats.load_shortfalls([a, b]) == {32: "9.5 of 32 in flight"}


def test_malformed_probe_lines_are_counted_and_the_prediction_says_so(tmp_path: Path) -> None:
    path = tmp_path / "probe.jsonl"
    point = ProbePoint(batch=1, tokens=2, repeat=0, step_s=0.02, timing="prefill_time histogram", client_s=0.03,
                       context_tokens_mean=128.0, computed_tokens=2.0, expected_tokens=2, ok=True)
    append_point(path, point)
    with open(path, "a") as handle:
        handle.write('{"batch": 1, "tok\n{not json}\n')
    read = read_points(path)
    assert len(read) == 1 and read.malformed == 2


def test_a_probe_point_whose_prompts_did_not_share_one_step_is_refused() -> None:
    base = dict(tokens=2, repeat=0, step_s=0.02, timing="prefill_time histogram", client_s=0.03,
                context_tokens_mean=128.0, computed_tokens=8.0, expected_tokens=8, ok=True)
    split = check_point(ProbePoint(batch=4, steps_seen=2, **base), requests_finished=4)
    assert not split.ok and "did not share one engine step" in split.refused
    one = check_point(ProbePoint(batch=4, steps_seen=1, **base), requests_finished=4)
    assert one.ok
    busy = check_point(ProbePoint(batch=4, steps_seen=1, **base), requests_finished=6)
    assert not busy.ok and "foreign traffic" in busy.refused and busy.foreign_requests == 2


def test_the_probe_budget_its_refusal_names_is_a_parameter_01_takes() -> None:
    """'raise probe_budget_s' must name something a user can set: 01 takes it, and passes it on."""
    import inspect

    from speclab import workbook
    from speclab.measure import probe
    from speclab.options import PROBE_BUDGET_S
    from speclab.params import BaselineParams

    assert "probe_budget_s" in inspect.getsource(probe.probe_live)
    assert BaselineParams.model_fields["probe_budget_s"].default == PROBE_BUDGET_S
    assert BaselineParams.validate_values({"mode": "embedded", "probe_budget_s": 600}).probe_budget_s == 600
    with pytest.raises(SpeclabError, match="probe_budget_s"):
        BaselineParams.validate_values({"mode": "embedded", "probe_budget_s": 0})
    assert "budget_s=params.probe_budget_s" in inspect.getsource(workbook.measure_probe)


def test_latency_percentiles_read_the_steady_window_and_say_so() -> None:
    records = []
    for i in range(10):  # concurrency 2: the first two ramp up with a slow first token, the last drains
        ttft = 0.5 if i < 2 else 0.05
        records.append(RequestRecord(request_id=f"r{i}", prompt_id=f"p{i}", category="c", send_time_s=float(i),
                                     ttft_s=ttft, e2e_s=ttft + 0.9, tpot_s=0.01, output_tokens=10, http_status=200))
    level = summarise_level(records, concurrency=2, rate=None, counters=None, foreign=None)
    assert level["latency_window"].startswith("steady window (")
    assert level["ttft_s_median"] == pytest.approx(0.05)  # the ramp-up's slow first tokens are left out


def test_one_rule_for_the_restart_cost_in_01_and_05() -> None:
    assert payback.restart_cost_s(30, 40.0) == (1800.0, "restart_minutes (given)")
    assert payback.restart_cost_s(None, None, 36.0)[0] == 36.0
    assert payback.restart_cost_s(None, None) == (None, "unknown")
    predicted = pd.DataFrame({"option": ["ngram k=4"] * 2, "category": ["all"] * 2, "concurrency": [1, 4],
                              "predicted_speedup": [1.5, 1.2]})
    run = _run([], server={"load_time_s": 40.0})
    from_01 = tables.payback_table(run, [{"concurrency": 1, "hours_per_day": 24}], 30, predicted)
    bundle = decision.ReportBundle(_run([], params={"restart_minutes": 30}, server={"load_time_s": 40.0}), [])
    from_05 = decision.restart_cost(bundle, _run([], server={"load_time_s": 55.0}))
    assert set(from_01["restart_from"]) == {from_05[1]} and from_05[0] == 1800.0


def test_05_says_no_prediction_only_for_a_sentence_and_lets_a_bug_through(monkeypatch: pytest.MonkeyPatch,
                                                                            tmp_path: Path) -> None:
    option = _run([], path=str(tmp_path / "ngram"))
    option.levels = pd.DataFrame([{"arm": "ngram"}])
    bundle = decision.ReportBundle(_run([]), [option])

    def refuse(*args: object, **kwargs: object) -> pd.DataFrame:
        raise SpeclabError("the baseline saved no cost model")

    monkeypatch.setattr(tables, "predicted_vs_measured", refuse)
    frame, note = decision._predicted_before(bundle, option)
    assert frame.empty and note == "no prediction: the baseline saved no cost model"

    def bug(*args: object, **kwargs: object) -> pd.DataFrame:
        raise KeyError("predicted_speedup")

    monkeypatch.setattr(tables, "predicted_vs_measured", bug)
    with pytest.raises(KeyError):
        decision._predicted_before(bundle, option)


def test_a_failed_refit_with_the_baselines_own_steps_is_a_fallback_the_report_shows(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from speclab.predict import stepmodel

    model = stepmodel.calibrate_from_runs(DATA / "stream-f32-baseline", DATA / "stream-f32-ngram")
    assert model.steps is not None and model.step_data is not None
    monkeypatch.setattr(stepmodel, "_stream_fit", lambda steps, source: None)
    other = tmp_path / "baseline"
    shutil.copytree(DATA / "f32-baseline", other)
    kept = stepmodel.with_baseline_steps(model, other)
    assert kept is model and any("refit with baseline's own engine steps failed" in n for n in kept.fallbacks)
    record = {"source": "calibrate", "model": {"fallbacks": kept.fallbacks}}
    (other / "cost_model.json").write_text(json.dumps(record))
    from speclab.runfolder import load_run

    found = caveats.caveats([load_run(other)])
    assert any(c.kind is Kind.FALLBACK and "refit" in c.message for c in found)
    assert math.isfinite(kept.baseline_step_s(1))
