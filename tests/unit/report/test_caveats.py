"""What the data says against a number (speclab.report.caveats), in external mode as a production team
runs it: load shortfalls and quiet paths made loud."""

from __future__ import annotations

import pandas as pd

from speclab.report import caveats, tables
from speclab.report.caveats import Kind
from tests.unit.report.helpers import run_data as _run


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
