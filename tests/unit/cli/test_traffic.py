"""`speclab replay-logs` (speclab.cli.traffic): a run with a report section, a baseline run's cost
model and restart time."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from speclab.cli import main
from speclab.sections import read_section
from speclab.traffic.gen import write_log
from tests.unit.helpers import COST


def test_cli_replay_logs_writes_a_run_with_a_report_section(tmp_path: Path, model_folder: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    log = write_log(tmp_path / "log.jsonl", 150, seed=6, shape="openai")
    with open(log, "ab") as out:
        out.write(b"garbage\n")
    cost = tmp_path / "cost.yaml"
    cost.write_text(json.dumps(COST))
    run_dir = tmp_path / "outputs" / "replay"
    code = main(["replay-logs", "--log", str(log), "--model", str(model_folder), "--single-process",
                 "--cost-model", str(cost), "--ngram-k", "2,4", "--batch-size", "64", "--quiet",
                 "--resume", str(run_dir)])
    assert code == 0
    out = capsys.readouterr().out
    assert "ngram k=4 (2..4)" in out and "bad row 150: not JSON" in out
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "ok" and manifest["kind"] == "replay-logs"
    assert manifest["traffic"]["bad_rows"] == 1 and manifest["traffic"]["rows"] == 151
    section = read_section(run_dir)
    assert section is not None and section.kind == "traffic-replay"
    assert {"acceptance_by_category", "day_by_option", "concurrency_profile"} <= set(section.tables)
    assert "day_profile" in section.figures
    day = section.tables["day_by_option"]
    assert day["predicted_speedup"].between(0.2, 5).all() and not math.isnan(day["payback_hours"].iloc[0])


def test_cli_takes_the_cost_model_and_restart_time_of_a_baseline_run(tmp_path: Path, model_folder: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    baseline = tmp_path / "baseline"
    shutil.copytree(Path(__file__).parents[2] / "data" / "predict" / "f32-baseline", baseline)
    (baseline / "cost_model.json").write_text(json.dumps({"source": "baseline_slope"}))
    manifest = json.loads((baseline / "manifest.json").read_text())
    manifest.setdefault("server", {})["load_time_s"] = 90.0
    (baseline / "manifest.json").write_text(json.dumps(manifest))
    log = write_log(tmp_path / "ids.jsonl", 100, seed=2, ids=True)
    run_dir = tmp_path / "replay"
    assert main(["replay-logs", "--log", str(log), "--model", str(model_folder), "--single-process", "--quiet",
                 "--baseline-run", str(baseline), "--ngram-k", "3", "--resume", str(run_dir)]) == 0
    day = pd.read_parquet(run_dir / "traffic_day.parquet")
    assert day["restart_downtime_h"].tolist() == [pytest.approx(90.0 / 3600)]
    assert main(["replay-logs", "--log", str(log), "--single-process", "--baseline-run", str(baseline),
                 "--cost-model", "x.yaml"]) == 1
    assert "not both" in capsys.readouterr().err
