"""`speclab run` (speclab.cli.workbook): a notebook's inputs checked before it makes a run folder or
starts a server, and a headless notebook whose progress bars reach the terminal, never the report."""

from __future__ import annotations

from pathlib import Path

import pytest

from speclab.cli.workbook import run_notebook
from speclab.errors import SpeclabError
from speclab.measure import progress


def _no_runs(root: Path) -> bool:
    return not any(p.is_dir() for p in root.rglob("*"))


def test_a_missing_prompt_file_is_one_sentence_and_no_run_folder(tmp_path: Path) -> None:
    with pytest.raises(SpeclabError, match="cannot be read") as err:
        run_notebook("01-baseline", [], [f"prompts={tmp_path / 'nope.jsonl'}"], outputs_root=str(tmp_path / "out"))
    assert "\n" not in err.value.message
    assert _no_runs(tmp_path)


def test_an_unset_key_variable_stops_before_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECLAB_NO_SUCH_KEY", raising=False)
    with pytest.raises(SpeclabError, match="SPECLAB_NO_SUCH_KEY"):
        run_notebook("01-baseline", [], ["api_key_env=SPECLAB_NO_SUCH_KEY"], outputs_root=str(tmp_path / "out"))
    assert _no_runs(tmp_path)


def test_an_option_notebook_without_a_baseline_says_so(tmp_path: Path) -> None:
    with pytest.raises(SpeclabError, match="01-baseline"):
        run_notebook("02-ngram", [], [], outputs_root=str(tmp_path / "out"))
    assert _no_runs(tmp_path)


@pytest.mark.usefixtures("no_progress_routing")
def test_a_headless_notebook_draws_its_bars_in_the_terminal_not_in_the_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import nbformat

    from speclab.cli import workbook

    source = tmp_path / "nb" / "98-bars.ipynb"
    source.parent.mkdir()
    cells = [nbformat.v4.new_code_cell("interactive = True", metadata={"tags": ["parameters"]}),
             nbformat.v4.new_code_cell(
                 "import time\nfrom speclab.measure import progress\n"
                 "for show in (interactive, True):\n"
                 "    with progress.bar(total=3, desc=f'relayed work {show}', unit='step', show=show) as b:\n"
                 "        for _ in range(3):\n"
                 "            time.sleep(0.05); b.update(1)\n"
                 "print('cell done')")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}}), source)
    monkeypatch.setattr(workbook, "notebook_path", lambda name: source)
    monkeypatch.setenv("PYTHONPATH", str(Path(progress.__file__).resolve().parents[2]))
    run_dir = workbook.run_notebook("98-bars", [], [], outputs_root=str(tmp_path / "out"))
    err = capsys.readouterr().err
    assert "relayed work False" in err and "relayed work True" in err and "3/3" in err
    executed = (run_dir / "notebook.ipynb").read_text()
    html = (run_dir / "report.html").read_text()
    assert "cell done" in executed
    for text in (executed, html):  # the cell's source names the bars; no drawn bar is there
        assert "relayed work False" not in text and "relayed work True" not in text and "3/3" not in text

    progress.set_quiet()
    try:
        workbook.run_notebook("98-bars", [], [], outputs_root=str(tmp_path / "quiet"))
    finally:
        progress.set_quiet(False)
    assert "relayed work" not in capsys.readouterr().err
