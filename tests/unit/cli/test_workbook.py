"""`speclab run` checks a notebook's inputs before it makes a run folder or starts a server."""

from __future__ import annotations

from pathlib import Path

import pytest

from speclab.cli.workbook import run_notebook
from speclab.errors import SpeclabError


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
