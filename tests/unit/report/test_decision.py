"""05-report's decision from run folders only (speclab.report.decision): decision rows, records,
recommendation, heatmaps, sections, and the decision table against the one the workbook gave
before the layering refactor.

The baseline and n-gram runs under tests/data/predict are real runs of the embedded server
(float32, 2 levels, 4 categories x 2 prompts).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from speclab.params import ReportParams
from speclab.predict import compare
from speclab.predict.payback import payback_hours
from speclab.report import decision as report
from speclab.report.caveats import Caveat, Kind
from speclab.runs import Run
from speclab.sections import write_section

RUNS = Path(__file__).resolve().parents[2] / "data" / "predict"
EXPECTED = Path(__file__).resolve().parents[2] / "data" / "report"


@pytest.fixture(scope="module")
def bundle() -> report.ReportBundle:
    params = ReportParams(baseline_run=str(RUNS / "f32-baseline"), option_runs=[str(RUNS / "f32-ngram")],
                          bootstrap_resamples=200)
    return report.collect(params)


def test_decision_rows_are_the_paired_all_category_cells(bundle: report.ReportBundle) -> None:
    rows = report.decision_rows(bundle)
    option = bundle.options[0].label
    assert list(rows["concurrency"]) == [1, 4] and set(rows["option"]) == {option}
    all_cells = bundle.comparisons[option].query("category == 'all'")
    assert rows["speedup"].tolist() == pytest.approx(all_cells["speedup"].tolist())
    assert rows["baseline_tok_s"].tolist() == pytest.approx(bundle.baseline.levels["output_tok_s"].tolist())
    assert rows["restart_s"].iloc[0] == pytest.approx(26.647, abs=0.01)
    html = report.decision_table(bundle).to_html()
    assert 'id="T_decision-table"' in html and "[" in html  # speedup with its interval


def test_payback_uses_the_measured_speedups_and_the_baselines_traffic(bundle: report.ReportBundle) -> None:
    rows = report.decision_rows(bundle)
    option = bundle.options[0]
    expected = payback_hours(option.server["load_time_s"], dict(zip(rows["concurrency"], rows["speedup"], strict=True)),
                             [{"concurrency": 1, "hours_per_day": 4}, {"concurrency": 4, "hours_per_day": 8}])
    got = report.measured_payback(bundle, option)
    assert got == pytest.approx(float(expected["payback_hours"].iloc[-1]))
    # 26.6 s of downtime repaid by ~1 server-hour freed per day: minutes, not hours
    assert 0.05 < got < 0.5


def test_a_decision_record_holds_prediction_measurement_payback_and_caveats(bundle: report.ReportBundle) -> None:
    (record,) = report.decision_records(bundle)
    assert record.run == "predict/f32-ngram" and record.baseline_run == "predict/f32-baseline"
    measured = record.measured
    assert {"predicted_speedup", "speedup", "ci_low", "ci_high", "verdict", "measured_acceptance_rate",
            "prediction_error_pct"} <= set(measured.columns)
    assert measured["predicted_speedup"].between(0.5, 3).all()
    assert measured["measured_acceptance_rate"].between(0.3, 0.6).all()  # n-gram on these prompts: ~45 %
    assert "not measurably different" in record.verdict
    # point estimates that no interval supports give no payback claim, only the figure they would give
    assert "no payback is claimed" in record.verdict and "its restart pays back after" not in record.verdict
    assert any(c.startswith(f"{record.option}: 8 category cells rest on fewer than 3 prompt pairs")
               for c in record.caveats)
    html = report.render_record(record)
    assert "Restart cost:" in html and "27 s of downtime" in html and "Payback:" in html
    assert str(RUNS) not in html and "/root/" not in html


def _with_verdicts(bundle: report.ReportBundle, speedups: dict[int, tuple[float, float, float]]) -> report.ReportBundle:
    """The same runs with their 'all' cells replaced: speedup, CI low, CI high per concurrency."""
    label = bundle.options[0].label
    rows = [{"category": "all", "concurrency": c, "pairs": 8, "speedup": s, "ci_low": lo, "ci_high": hi,
             "verdict": compare.verdict(lo, hi)} for c, (s, lo, hi) in speedups.items()]
    return report.ReportBundle(bundle.baseline, bundle.options, {label: pd.DataFrame(rows)})


def test_the_recommendation_is_one_sentence_that_follows_the_evidence(bundle: report.ReportBundle) -> None:
    keep = report.recommendation(bundle)
    # every interval includes 1: no recommendation, and why
    assert keep.startswith("No recommendation yet: no option was measurably faster or slower")
    slow = report.recommendation(_with_verdicts(bundle, {1: (0.8, 0.7, 0.9), 4: (0.98, 0.9, 1.05)}))
    assert slow.startswith("Keep the baseline: no option was measurably faster") and "slower at concurrency 1" in slow
    win = report.recommendation(_with_verdicts(bundle, {1: (1.5, 1.3, 1.7), 4: (1.2, 1.1, 1.3)}))
    assert win.startswith(f"Restart into {bundle.options[0].label}: it was faster at concurrency 1 and 4")
    assert "1.50x [1.30, 1.70] at concurrency 1" in win and "pays its restart back" in win
    mixed = report.recommendation(_with_verdicts(bundle, {1: (1.5, 1.3, 1.7), 4: (0.8, 0.7, 0.9)}))
    assert "slower at concurrency 4" in mixed and "keep the baseline if your traffic runs there" in mixed
    dirty = [Caveat(Kind.CONTAMINATED, "baseline and x", "r", "any sentence at all",
                    detail="the hypervisor took up to 9 % of the CPU (steal)")]
    stop = report.recommendation(_with_verdicts(bundle, {1: (1.5, 1.3, 1.7)}), found=dirty)
    assert stop.startswith("No recommendation: the hypervisor took up to 9 %") and "quiet machine" in stop
    broken = [Caveat(Kind.NOT_LOSSLESS, bundle.options[0].label, "r", "any sentence at all")]
    refuse = report.recommendation(_with_verdicts(bundle, {1: (1.5, 1.3, 1.7)}), found=broken)
    assert refuse.startswith(f"Do not restart into {bundle.options[0].label} yet")
    for sentence in (keep, win, mixed, slow, stop, refuse):
        assert sentence.endswith(".") and "\n" not in sentence


def test_one_heatmap_per_option(bundle: report.ReportBundle) -> None:
    figures = report.heatmaps(bundle)
    assert list(figures) == [bundle.options[0].label]
    ax = figures[bundle.options[0].label].axes[0]
    texts = [t.get_text() for t in ax.texts]
    # 'all' + 4 categories at 2 levels, each cell with speedup and verdict
    assert len(texts) == 10 and all("x\n" in t for t in texts)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == "all" and "code_editing" in labels
    hatched = [p for p in ax.patches if p.get_hatch()]
    unclear = bundle.comparisons[bundle.options[0].label]["verdict"].isin([compare.UNCLEAR, compare.TOO_FEW]).sum()
    assert len(hatched) == unclear > 0
    for figure in figures.values():
        plt.close(figure)


def test_caveats_name_runs_by_id_never_by_path(bundle: report.ReportBundle) -> None:
    found = report.report_caveats(bundle)
    assert found and all(c.run.startswith("predict/") for c in found)
    assert all(str(RUNS) not in str(c) for c in found)


def test_identities_and_launch_commands_cut_local_paths(bundle: report.ReportBundle) -> None:
    frame = report.identities(bundle)
    text = frame.to_string()
    assert "http://127.0.0.1:0" in text and "smollm2-135m" in text and "launch" not in frame.index
    launch = report.launch_commands(bundle)
    assert list(launch["run"]) == ["predict/f32-baseline", "predict/f32-ngram"]
    commands = " ".join(launch["launch"])
    assert "libtcmalloc_minimal.so.4" in commands and "--enforce-eager" in commands
    for local in ("/usr/lib", "/root/", "/work/"):
        assert local not in text and local not in commands


def _run_with_section(root: Path, name: str, kind: str, title: str, status: str = "ok") -> Path:
    run = Run.create(name, {}, kind=name, outputs_root=root)
    write_section(run.path, kind=kind, title=title, summary=[f"{title} says something."],
                  tables={"shares": pd.DataFrame({"bucket": ["gemm"], "share": [0.61]})}, notes=["a caveat"])
    run.finalize(status)
    return run.path


def test_latest_section_of_each_kind_in_reading_order(tmp_path: Path) -> None:
    _run_with_section(tmp_path, "04-moespec", "moe-what-if", "MoE old")
    _run_with_section(tmp_path, "00-profile", "profile", "Profile old")
    _run_with_section(tmp_path, "00-profile", "profile", "Profile new")
    _run_with_section(tmp_path, "04-moespec", "moe-what-if", "MoE failed", status="failed")
    _run_with_section(tmp_path, "99-custom", "zzz-custom", "Custom")
    sections = report.latest_sections(tmp_path)
    assert [s.title for s in sections] == ["Profile new", "MoE old", "Custom"]
    assert all("/" in s.run_id and str(tmp_path) not in s.run_id for s in sections)
    parts = report.render_section(sections[0])
    html = "".join(getattr(p, "data", "") or "" for p in parts)
    assert "61.0%" in html and "a caveat" in html and sections[0].run_id in html


def test_collapsed_folds_a_long_table() -> None:
    html = report.collapsed("<table></table>", "Every category cell (42 rows)")
    assert html.startswith("<details") and "<summary" in html and "42 rows" in html


def test_recommendation_never_pays_back_when_the_option_saves_nothing(bundle: report.ReportBundle) -> None:
    slow = _with_verdicts(bundle, {1: (1.2, 1.1, 1.3), 4: (0.5, 0.45, 0.55)})
    (record,) = report.decision_records(slow, [])
    assert record.payback_h is not None and math.isinf(record.payback_h)
    assert "never pays back" in record.verdict


def test_a_section_never_shows_local_paths(tmp_path: Path) -> None:
    """Sections write what they like (04 names the baseline it replayed); the report cuts it."""
    run = Run.create("04-moespec", {}, kind="04-moespec", outputs_root=tmp_path)
    baseline = "/home/someone/work/outputs/2026-12-01/101010-01-baseline-default"
    write_section(run.path, kind="moe-what-if", title="MoE", summary=[f"replayed over {baseline}"],
                  tables={"acceptance": pd.DataFrame({"source": [f"requests of {baseline}"], "share": [0.5]})},
                  notes=[f"no tokenizer at {baseline}/model"])
    run.finalize("ok")
    (section,) = report.latest_sections(tmp_path)
    html = "".join(str(getattr(p, "data", "") or "") for p in report.render_section(section))
    assert "/home/someone" not in html and "101010-01-baseline-default" in html


# --------------------------------------------------------------------------- regression
# The decision table, rebuilt from committed run folders, equals the table the workbook gave
# before the layering refactor (tests/data/report/*.csv were written by the code of that time;
# only the fixture manifests' option label was repaired from an old redaction bug). The intervals
# are the paired bootstrap alone (instance_sd 0); the server-instance spread is tested apart.


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
    expected = pd.read_csv(EXPECTED / "decision_rows_f32.csv")
    pd.testing.assert_frame_equal(rows.reset_index(drop=True)[expected.columns], expected,
                                  check_dtype=False, rtol=1e-9)


def test_the_per_category_comparison_is_unchanged() -> None:
    bundle = _bundle()
    table = bundle.comparisons[bundle.options[0].label]
    expected = pd.read_csv(EXPECTED / "comparison_f32.csv")
    pd.testing.assert_frame_equal(table.reset_index(drop=True)[expected.columns], expected,
                                  check_dtype=False, rtol=1e-9)
