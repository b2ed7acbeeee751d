"""05-report through papermill on recorded runs (no server): the HTML reads as a document.

The baseline and n-gram folders under tests/data/predict are real embedded-server runs; a
profile section is written from the recorded H200 MoE trace, as 00-profile would.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from speclab.cli.workbook import run_notebook
from speclab.profiling import analyse_profile
from speclab.report import findings
from speclab.runs import Run

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"


def _visible_text(html: str) -> str:
    html = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", html)
    html = re.sub(r"<style.*?</style>", "", html, flags=re.S)
    return re.sub(r"<[^>]+>", " ", html)


@pytest.mark.notebook
def test_report_html_reads_as_a_document(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    outputs = tmp_path / "outputs"
    profile_run = Run.create("00-profile", {}, kind="00-profile", outputs_root=outputs)
    findings.write_profile_section(profile_run.path, analyse_profile(DATA / "traces" / "h200-qwen2moe"))
    profile_run.finalize("ok")

    folder = run_notebook("05-report", [str(ROOT / "params/05-report/smoke.yaml")],
                          [f"baseline_run={DATA / 'predict/f32-baseline'}",
                           f"option_runs=[{DATA / 'predict/f32-ngram'}]"], outputs_root=str(outputs))
    html = (folder / "report.html").read_text()
    text = _visible_text(html)

    # opens with one recommended action, then one decision record per option
    assert "Recommendation." in text and "No recommendation yet: no option was measurably faster or slower" in text
    assert html.count('class="speclab-record"') == 1
    assert "Restart cost:" in text and "Payback:" in text and "Caveats that apply" in text
    # formatted tables: intervals, percentages, no index column, no raw DataFrame anywhere
    assert re.search(r"\d\.\d\dx \[\d\.\d\d, \d\.\d\d\]", text)
    assert "%" in text and 'class="row_heading' not in html and 'class="dataframe"' not in html
    assert not re.search(r"\b\d+\.\d{5,}\b", text), re.findall(r"\b\d+\.\d{5,}\b", text)[:5]
    # the heatmap, the long table folded behind it, the profile section from its run folder
    assert "Where each option wins" in text and "<details" in html and "Every category cell" in text
    assert "Where decode time goes (00-profile)" in text and "Decode time by bucket:" in text
    assert html.count("data:image/png;base64") >= 4  # throughput, heatmap, two profile figures
    # nothing local: run ids, not paths
    for local in (str(DATA), str(tmp_path), "/root/", str(ROOT)):
        assert local not in html, local
    assert "predict/f32-ngram" in text
    # the caveats as a list, and a quiet kernel
    assert 'class="speclab-notes"' in html
    assert "without encryption" not in capfd.readouterr().err
