"""Committed notebooks: output-free, one parameters cell in step with its pydantic model."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from speclab.params import NOTEBOOK_PARAMS, validate_params_file

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PARAM_LINE = re.compile(r"^(\w+)\s*:\s*[\w\[\], ]+\s*=\s*(.+?)\s+#\s+\S")


def test_the_workbook_notebooks_exist() -> None:
    names = {p.stem for p in NOTEBOOKS}
    assert {"01-baseline", "02-ngram", "05-report"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name} has outputs"
            assert cell.execution_count is None, f"{path.name} has execution counts"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_one_parameters_cell_in_step_with_the_model(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1
    names = []
    for line in cells[0].source.splitlines():
        if not line.strip():
            continue
        match = PARAM_LINE.match(line)
        assert match, f"{path.name}: not a typed literal with a # help comment: {line!r}"
        assert "=" not in line.split("#", 1)[1], f"'=' in a help comment breaks papermill: {line!r}"
        names.append(match.group(1))
    model = NOTEBOOK_PARAMS[path.stem]
    assert set(names) == set(model.model_fields), f"{path.name} parameters vs {model.__name__}"
    # the literals themselves validate
    namespace: dict = {"Optional": None}
    exec(compile("from typing import Optional\n" + cells[0].source, path.name, "exec"), namespace)
    model.from_namespace(namespace)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_papermill_documents_every_parameter(path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "papermill", "--help-notebook", str(path)],
                         capture_output=True, text=True, check=True).stdout
    documented = set(re.findall(r"^  (\w+): ", out, re.M))
    assert documented == set(NOTEBOOK_PARAMS[path.stem].model_fields)


PARAM_FILES = sorted(p for p in (ROOT / "params").rglob("*.yaml") if p.name != "scenario.yaml")


def test_the_seeds_scenario_example_validates_and_is_the_default() -> None:
    from speclab.moe.seeds import SeedScenario
    from speclab.params import load_params_file

    scenario = SeedScenario.model_validate(load_params_file(ROOT / "params/examples/kimi-k25-8xpcie/scenario.yaml"))
    # the example spells out the seeds' figures and speclab's defaults: one truth per number
    assert scenario == SeedScenario()


@pytest.mark.parametrize("path", PARAM_FILES, ids=lambda p: str(p.relative_to(ROOT / "params")))
def test_every_params_file_validates(path: Path) -> None:
    from speclab.params import NOTEBOOK_PARAMS

    # examples are named <notebook>[-variant].yaml, e.g. 03-eagle3-drafter-sglang.yaml
    notebook = path.parent.name if path.parent.parent.name == "params" else max(
        (n for n in NOTEBOOK_PARAMS if path.stem.startswith(n)), key=len, default=path.stem)
    validate_params_file(notebook, path)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_code_cell_compiles(path: Path) -> None:
    """A syntax error would stop a notebook only after it has measured: catch it here, in seconds."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        # IPython magics and shell lines are not Python; everything else must compile as written
        source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in cell.source.splitlines())
        try:
            compile(source, f"{path.name}:{cell.get('id')}", "exec")
        except SyntaxError as exc:
            pytest.fail(f"{path.name} cell {cell.get('id')}: {exc}")
