"""External mode as a production team runs it: restart cost, load shortfalls and quiet paths made loud."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from speclab.params import BaselineParams
from speclab.report import caveats, tables
from speclab.report.caveats import Kind
from speclab.runfolder import RunData

EXTERNAL = {"mode": "external", "endpoint": "http://gpu-box:8000/v1", "verify_cost": "baseline_slope"}


def _run(levels: list[dict], server: dict | None = None) -> RunData:
    return RunData(Path("2026-12-03/101500-01-baseline"), {"status": "ok", "server": server or {}, "params": {}},
                   pd.DataFrame(), pd.DataFrame(levels))


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


def test_a_level_short_of_its_concurrency_is_marked_in_tables_and_caveats() -> None:
    run = _run([{"concurrency": 4, "inflight_mean": 3.9, "inflight_below_target": False},
                {"concurrency": 32, "inflight_mean": 27.4, "inflight_below_target": True}])
    marked = tables.mark_load(pd.DataFrame({"concurrency": [4, 32], "speedup": [1.1, 0.9]}), [run])
    assert marked["in_flight"].tolist() == ["full", "27.4 of 32 in flight"]
    found = caveats.caveats([run])
    assert any(c.kind is Kind.LOAD_SHORTFALL and "concurrency 32 had only 27.4 of 32 in flight" in c.message
               for c in found)
    # a run whose levels all reached their load leaves tables as they are
    full = _run([{"concurrency": 4, "inflight_mean": 3.9, "inflight_below_target": False}])
    assert "in_flight" not in tables.mark_load(pd.DataFrame({"concurrency": [4]}), [full])


def test_a_failed_metrics_scrape_and_a_refused_cache_reset_become_caveats() -> None:
    run = _run([{"concurrency": 1, "metrics_scrape": "http://h:8000/metrics answered HTTP 404",
                 "prefix_cache_reset": "refused (HTTP 404)"},
                {"concurrency": 4, "metrics_scrape": "ok", "prefix_cache_reset": "refused (HTTP 404)"}])
    found = {c.kind: c.message for c in caveats.caveats([run])}
    assert found[Kind.METRICS_UNREAD].startswith("/metrics could not be read at concurrency 1 ")
    assert "prefix-cache reset refused (HTTP 404)" in found[Kind.CACHE_RESET_REFUSED]
    quiet = _run([{"concurrency": 1, "metrics_scrape": "ok", "prefix_cache_reset": "reset"}])
    assert not caveats.kinds(caveats.caveats([quiet])) & {Kind.METRICS_UNREAD, Kind.CACHE_RESET_REFUSED}
