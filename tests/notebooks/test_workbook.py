"""Each notebook through papermill with its smoke params, against the real embedded server."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from speclab.cli.workbook import run_notebook
from speclab.errors import SpeclabError
from speclab.runs import Run
from tests.notebooks.html_checks import assert_html_free_of_local_paths, assert_html_numbers_humane

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"


def _errors(notebook: Path) -> list[str]:
    nb = nbformat.read(notebook, as_version=4)
    return [o.get("evalue", "") for c in nb.cells if c.cell_type == "code"
            for o in c.get("outputs", []) if o.get("output_type") == "error"]


def test_a_bad_parameter_stops_at_validation_with_one_sentence(tmp_path: Path) -> None:
    # caught before anything runs...
    with pytest.raises(SpeclabError, match=r"concurrency.0: Input should be greater than or equal to 1|concurrency"):
        run_notebook("01-baseline", [str(ROOT / "params/01-baseline/smoke.yaml")],
                     ["concurrency=[0]"], outputs_root=str(tmp_path))
    # ...and inside the notebook when papermill is called directly
    out = tmp_path / "out.ipynb"
    result = subprocess.run(
        [sys.executable, "-m", "papermill", str(ROOT / "notebooks/01-baseline.ipynb"),
         str(out), "-p", "mode", "external", "-p", "interactive", "False", "--cwd", str(tmp_path)],
        capture_output=True, text=True)
    assert result.returncode != 0
    errors = _errors(out)
    assert len(errors) == 1
    assert "mode 'external' needs 'endpoint'" in errors[0] and "\n" not in errors[0]


@pytest.mark.integration
@pytest.mark.notebook
@pytest.mark.usefixtures("vllm_lock")
def test_baseline_ngram_report_through_papermill(tmp_path: Path, smoke_baseline: Path) -> None:
    outputs = str(tmp_path / "outputs")
    smoke = lambda name: [str(ROOT / "params" / name / "smoke.yaml")]
    baseline = smoke_baseline
    ngram = run_notebook("02-ngram", smoke("02-ngram"), [f"baseline_run={baseline}"], outputs_root=outputs)
    eagle = run_notebook("03-eagle3-drafter", smoke("03-eagle3-drafter"), [f"baseline_run={baseline}"],
                         outputs_root=outputs)
    report = run_notebook("05-report", smoke("05-report"), [f"baseline_run={baseline}"], outputs_root=outputs)
    for folder in (baseline, ngram, eagle, report):
        assert Run.open(folder).manifest["status"] == "ok"
        assert (folder / "report.html").stat().st_size > 10_000
        assert _errors(folder / "notebook.ipynb") == []
        assert_html_free_of_local_paths(folder, tmp_path)
        assert_html_numbers_humane(folder)
    assert (baseline / "requests.parquet").exists() and (ngram / "summary.json").exists()
    # the report opens with the configuration the baseline's search recommended, and no caveat
    # of any notebook says its own run is still running
    html = (report / "report.html").read_text()
    assert "Before any restart, the baseline" in html and (baseline / "recommended-config.json").exists()
    for folder in (baseline, ngram, eagle, report):
        assert "has not finished" not in (folder / "report.html").read_text()
    assert Run.open(ngram).manifest["baseline_run"] == str(baseline)
    assert Run.open(eagle).manifest["baseline_run"] == str(baseline) and Run.open(eagle).manifest["method"] == "eagle3"
    # after the restart, 02 splits the option's own steps: speculative mode's cost and a draft token's price
    own = (ngram / "notebook.ipynb").read_text()
    assert "Speculative mode itself cost" in own and "give spec_mode_overhead_ms: [" in own
    assert "Published anchors" in (eagle / "next-steps-eagle.md").read_text()
    assert (eagle / "report_section" / "section.json").exists() and (eagle / "offline-prediction.json").exists()
    _assert_the_served_head_drafts_as_replayed(eagle, tmp_path)
    # predicted before the restart, from a real calibration run on other prompts
    import pandas as pd

    cost = json.loads((baseline / "cost_model.json").read_text())
    levels = json.loads((baseline / "summary.json").read_text())["levels"]
    assert all(level["host_load"]["host_probe_ms"] > 0 for level in levels)  # host speed probed per level
    assert cost["source"] == "calibrate" and cost["model"]["per_verified_token_ms"] >= 0
    # its baseline arm ran on 01's own server (no second baseline start), the n-gram arm on its own
    calib_base = Path(cost["calibration_baseline_run"])
    assert calib_base == baseline / "calibration" / "verify-cost-baseline"
    assert Run.open(calib_base).manifest["server"]["pid"] == Run.open(baseline).manifest["server"]["pid"]
    assert Run.open(Path(cost["calibration_spec_run"])).manifest["params"]["option"]["method"] == "ngram"
    assert sorted(p.name for p in baseline.rglob("server-*.log")) == ["server-baseline.log", "server-ngram.log"]
    predicted = pd.read_parquet(baseline / "predictions.parquet")
    assert {"ngram k=4 (2..4)", "suffix k=8"} <= set(predicted["option"])
    assert predicted["predicted_speedup"].between(0.2, 10).all()
    html = (report / "report.html").read_text()
    assert 'id="T_decision-table"' in html and "Decision table" in html
    assert "ngram k=4" in html
    assert "data:image/png;base64" in html  # plots embedded: the report stands alone
    assert "import " not in html.split("<body", 1)[1]  # no code cells in the shared report

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium not installed (apt-get install chromium)")
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report-decision-table.png"
    dom = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'chrome'}", "--dump-dom", (report / "report.html").as_uri()],
        capture_output=True, text=True, timeout=120)
    assert 'id="T_decision-table"' in dom.stdout  # rendered by a real browser, not just present
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'chrome'}", "--window-size=1280,2000",
         f"--screenshot={shot}", (report / "report.html").as_uri()],
        capture_output=True, text=True, timeout=120, check=True)
    assert shot.exists() and shot.stat().st_size > 20_000


def _assert_the_served_head_drafts_as_replayed(eagle: Path, tmp_path: Path) -> None:
    """03 served the smoke recipe's trained head (tests/integration/test_eagle3_trained.py): vLLM
    drafted with it, and its offline replay over the token ids the server wrote predicts the served
    position-0 acceptance to 0.15 absolute (the offline count averages every answer row, the
    server drafts only from the last accepted token, and bf16 verification batches differently)."""
    from speclab.eagle3.train import SMOKE_HEAD, ensure_trained_head, evaluate_head
    from speclab.eagle3.workbook import baseline_token_rows, measured_acceptance
    from speclab.runfolder import load_run

    head = ensure_trained_head(**SMOKE_HEAD, progress=False)  # cached: 03 trained or took this one
    assert str(head) in (eagle / "restart-flags.txt").read_text()
    served = load_run(eagle)
    measured = measured_acceptance(served).iloc[0]
    assert measured["drafts"] > 20
    rows = baseline_token_rows(served, tmp_path / "served-tokens.jsonl")  # the eagle3 run's own answers
    offline = evaluate_head(head, rows, tmp_path / "offline-served.json", steps=3, progress=False)
    predicted_p0 = offline["overall"]["per_position_acceptance"][0]
    assert measured["position_0_rate"] > 0.05, measured  # a random head accepts ~0
    assert abs(predicted_p0 - measured["position_0_rate"]) < 0.15, (predicted_p0, measured["position_0_rate"])


@pytest.mark.integration
@pytest.mark.notebook
@pytest.mark.usefixtures("vllm_lock")
def test_profile_notebook_captures_and_buckets_a_real_trace(tmp_path: Path) -> None:
    """00-profile on the real embedded vLLM: a short window captured under load, bucketed.
    (The library's capture and the notebook around it are one test: one server start.)"""
    import pandas as pd

    from speclab.profiling import analyse_profile

    folder = run_notebook("00-profile", [str(ROOT / "params/00-profile/smoke.yaml")], [],
                          outputs_root=str(tmp_path))
    assert Run.open(folder).manifest["status"] == "ok"
    assert _errors(folder / "notebook.ipynb") == []
    assert_html_free_of_local_paths(folder, tmp_path)
    capture = json.loads((folder / "profile_capture.json").read_text())
    assert capture["engine"] == "vllm" and capture["load_running_at_stop"]
    traces = [Path(t) for t in capture["traces"]]
    assert traces and {t.parent.name for t in traces} == {"traces"} and all(t.exists() for t in traces)
    ranks = [t for t in traces if ".async_llm." not in t.name]
    assert len(ranks) == 1 and ranks[0].name.startswith("rank0.")
    # the load is rounds x concurrency requests (smoke: 1 x 2), not whole categories
    assert len(pd.read_json(folder / "requests.jsonl", lines=True)) == 1 * 2

    report = analyse_profile(folder / "traces")
    steps = report.steps
    assert len(steps) >= 5 and (steps["source"] == "cpu_op").all()
    assert (steps["step_kind"] == "decode").sum() >= 3
    summary = pd.read_parquet(folder / "profile_summary.parquet")
    decode = summary[summary["step_kind"] == "decode"].set_index("bucket")["share"]
    # docs/embedded-server.md: oneDNN GEMMs dominate SmolLM2 decode on this CPU
    assert decode.idxmax() == "dense_gemm" and decode["dense_gemm"] > 0.3, decode.sort_values().tail()
