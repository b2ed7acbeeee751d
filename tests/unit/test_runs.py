import datetime as dt
import json
import re
from pathlib import Path

import pytest

from speclab.errors import SpeclabError
from speclab.runs import Run, list_runs, new_run_dir, redact, redact_argv


def test_run_dirs_are_dated_and_never_reused(tmp_path: Path) -> None:
    now = dt.datetime(2026, 11, 29, 13, 5, 9).astimezone()
    first = new_run_dir("01-baseline", tmp_path, now)
    second = new_run_dir("01-baseline", tmp_path, now)
    assert first == tmp_path / "2026-11-29" / "130509-01-baseline"
    assert second == tmp_path / "2026-11-29" / "130509-01-baseline-2"
    assert new_run_dir("a b/../c", tmp_path, now).name == "130509-a-b-..-c"


def test_manifest_is_written_first_and_finalised_last(tmp_path: Path) -> None:
    run = Run.create("bench", {"concurrency": [1, 4], "api_key": "sk-secret"}, outputs_root=tmp_path)
    first = json.loads((run.path / "manifest.json").read_text())
    assert first["status"] == "running" and first["finished_utc"] is None
    assert first["params"] == {"concurrency": [1, 4], "api_key": "<redacted>"}
    assert "sk-secret" not in (run.path / "manifest.json").read_text()
    assert set(first) >= {"git", "packages", "started_utc", "python", "server"}
    assert "sha" in first["git"] and "dirty" in first["git"]
    with run.recording():
        run.set_server({"engine": "vllm", "launch_command": "x", "headers": {"Authorization": "Bearer t"}})
    final = json.loads((run.path / "manifest.json").read_text())
    assert final["status"] == "ok" and final["finished_utc"]
    assert final["server"]["headers"]["Authorization"] == "<redacted>"


def test_a_failed_run_keeps_its_error_sentence(tmp_path: Path) -> None:
    run = Run.create("bench", {}, outputs_root=tmp_path)
    with pytest.raises(SpeclabError), run.recording():
        raise SpeclabError("The server went away; restart it.")
    final = Run.open(run.path).manifest
    assert final["status"] == "failed" and final["error"] == "The server went away; restart it."


def test_list_runs_by_kind(tmp_path: Path) -> None:
    a = Run.create("01-baseline", {}, kind="01-baseline", outputs_root=tmp_path)
    Run.create("02-ngram", {}, kind="02-ngram", outputs_root=tmp_path)
    assert list_runs(tmp_path, kind="01-baseline") == [a.path]
    assert len(list_runs(tmp_path)) == 2


def test_redaction_of_nested_values_and_argv() -> None:
    assert redact({"a": [{"token": "x"}], "b": 1}) == {"a": [{"token": "<redacted>"}], "b": 1}
    assert redact_argv(["vllm", "serve", "--api-key", "k", "--port", "1", "--hf-token=t"]) == [
        "vllm", "serve", "--api-key", "<redacted>", "--port", "1", "--hf-token=<redacted>"]


def test_json_record_is_one_sentence_for_a_missing_broken_or_non_object_file(tmp_path: Path) -> None:
    from speclab.runs import json_record

    given = {"a": 1}
    assert json_record(given, what="engine measurement", fix="rerun it") is given
    good = tmp_path / "good.json"
    good.write_text('{"a": 2}')
    assert json_record(good, what="engine measurement", fix="rerun it") == {"a": 2}
    for name, text, expected in [("missing.json", None, "No engine measurement at"),
                                 ("broken.json", '{"a": ', "is not engine measurement JSON; rerun it."),
                                 ("list.json", "[1, 2]", "(not an object); rerun it.")]:
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        with pytest.raises(SpeclabError, match=re.escape(expected)):
            json_record(path, what="engine measurement", fix="rerun it")
