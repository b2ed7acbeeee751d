"""04-moespec through papermill with its smoke params: CPU only (no vLLM), a tiny CPU benchmark."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pandas as pd
import pytest

from speclab.cli.workbook import run_notebook
from speclab.runs import Run
from speclab.sections import read_section
from tests.notebooks.html_checks import assert_html_free_of_local_paths

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.notebook
@pytest.mark.usefixtures("vllm_lock")  # its CPU layer benchmark must not share the cores with a server
def test_moespec_notebook_runs_and_leaves_a_report_section(tmp_path: Path) -> None:
    folder = run_notebook("04-moespec", [str(ROOT / "params/04-moespec/smoke.yaml")], [],
                          outputs_root=str(tmp_path))
    assert Run.open(folder).manifest["status"] == "ok"
    nb = nbformat.read(folder / "notebook.ipynb", as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []
    assert (folder / "moe_layer_bench_cpu.json").exists()  # measured on this machine, kept with the run
    section = read_section(folder)
    assert section is not None and section.kind == "04-moespec"
    assert {"distinct-experts", "verify-cost", "budget-sweep", "seeds-case"} <= set(section.figures)
    budget = section.tables["budget-sweep"]
    assert set(budget["strategy"]) == {"substitution", "truncation"}
    assert isinstance(budget, pd.DataFrame) and (budget["experts_loaded"] <= budget["budget"] + 1e-9).all()
    assert any("replayed" in s for s in section.summary)
    html = (folder / "report.html").read_text()
    assert "data:image/png;base64" in html and "fitted" in html
    assert_html_free_of_local_paths(folder, tmp_path)
