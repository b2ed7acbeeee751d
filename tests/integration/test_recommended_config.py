"""The configuration search's restart line against the installed engine: every key of an
external vLLM recommendation is a field of the server venv's vLLM SpeculativeConfig (the embedded
server starting with a schedule, and 02's check of it, are in test_embedded_server.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from speclab import workbook as wb
from speclab.params import BaselineParams
from speclab.paths import server_python
from speclab.predict.costmodel import VerifyCost
from speclab.predict.stepmodel import baseline_step_model, mode_costs_for_run
from speclab.runfolder import RECOMMENDED_CONFIG_JSON, load_run

pytestmark = [pytest.mark.integration]
DATA = Path(__file__).resolve().parents[1] / "data" / "predict"
KIMI = Path(__file__).resolve().parents[2] / "params" / "examples" / "kimi-k25-8xpcie" / "01-baseline.yaml"


def _speculative_config_fields() -> set[str]:
    code = ("import dataclasses, json; from vllm.config.speculative import SpeculativeConfig; "
            "print(json.dumps([f.name for f in dataclasses.fields(SpeculativeConfig)]))")
    done = subprocess.run([str(server_python()), "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_an_external_vllm_recommendation_speaks_the_installed_vllms_keys(tmp_path: Path) -> None:
    import yaml

    run = tmp_path / "kimi-baseline"
    shutil.copytree(DATA / "f32-baseline", run)
    manifest = json.loads((run / "manifest.json").read_text())
    params = {**yaml.safe_load(KIMI.read_text()), "concurrency": [1, 4]}
    manifest["params"] = params
    manifest["server"]["version"] = "0.32.0"
    (run / "manifest.json").write_text(json.dumps(manifest))
    baseline = BaselineParams.validate_values(params)
    model = baseline_step_model(run, VerifyCost(per_token_s=0.0005), source="params")
    model.mode_costs, _ = mode_costs_for_run(run, {"ngram": 4, "ngram_gpu": 4, "suffix": 8})
    wb.configuration_search(baseline, load_run(run), model, ks=[2, 4])
    record = json.loads((run / RECOMMENDED_CONFIG_JSON).read_text())
    assert set(record) >= {"option", "restart_args", "predicted_speedup_by_concurrency",
                           "expected_daily_gain_server_h", "payback_hours"}
    # the Kimi day has 6 h at 128 and 10 h at 32: beyond this sweep (1-4), never judged
    assert {b["concurrency"] for b in record["beyond_sweep"]} == {32.0, 128.0}
    fields = _speculative_config_fields()
    lines = [record["restart_args"]] + [r["restart_args"] for r in record["runners_up"]]
    for args in lines:
        if args:
            assert args[0] == "--speculative-config"
            assert set(json.loads(args[1])) <= fields, (set(json.loads(args[1])) - fields)
