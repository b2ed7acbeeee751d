"""05-report's decision table, rebuilt from committed run folders, equals the table the workbook
gave before the layering refactor (tests/data/report/*.csv were written by the code of that time;
only the fixture manifests' option label was repaired from an old redaction bug). The intervals
are the paired bootstrap alone (instance_sd 0); the server-instance spread is tested apart."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from speclab.params import ReportParams
from speclab.report import decision as report

DATA = Path(__file__).resolve().parents[1] / "data"
RUNS = DATA / "predict"


def _bundle() -> report.ReportBundle:
    return report.collect(ReportParams(baseline_run=str(RUNS / "f32-baseline"),
                                       option_runs=[str(RUNS / "f32-ngram")], interactive=False,
                                       instance_sd=0.0))


def test_the_instance_spread_widens_every_interval_around_the_same_speedups() -> None:
    narrow = report.decision_rows(_bundle())
    wide = report.decision_rows(report.collect(ReportParams(
        baseline_run=str(RUNS / "f32-baseline"), option_runs=[str(RUNS / "f32-ngram")], interactive=False)))
    pd.testing.assert_series_equal(narrow["speedup"], wide["speedup"])
    assert (wide["ci_low"] < narrow["ci_low"]).all() and (wide["ci_high"] > narrow["ci_high"]).all()


def test_the_decision_rows_are_unchanged() -> None:
    rows = report.decision_rows(_bundle()).drop(columns=["restart_s"])
    expected = pd.read_csv(DATA / "report" / "decision_rows_f32.csv")
    pd.testing.assert_frame_equal(rows.reset_index(drop=True)[expected.columns], expected,
                                  check_dtype=False, rtol=1e-9)


def test_the_per_category_comparison_is_unchanged() -> None:
    bundle = _bundle()
    table = bundle.comparisons[bundle.options[0].label]
    expected = pd.read_csv(DATA / "report" / "comparison_f32.csv")
    pd.testing.assert_frame_equal(table.reset_index(drop=True)[expected.columns], expected,
                                  check_dtype=False, rtol=1e-9)
