"""The configuration search's restart line on the real engine: every key is a field of the
installed vLLM's SpeculativeConfig, the embedded server starts with a per-batch-size schedule,
and 02's check reads from the streams that no step at a k = 0 batch size accepted a draft."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from speclab import workbook as wb
from speclab.measure.loadgen import SweepConfig, measure_sweep, plan_sweep
from speclab.options import SpecOption
from speclab.params import BaselineParams
from speclab.paths import server_python
from speclab.predict.accuracy import schedule_check
from speclab.predict.costmodel import VerifyCost
from speclab.predict.stepmodel import baseline_step_model, mode_costs_for_run
from speclab.runfolder import RECOMMENDED_CONFIG_JSON, load_run
from speclab.runs import Run
from speclab.serve.target import ServerTarget, serve_target

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


@pytest.mark.usefixtures("vllm_lock")
def test_the_server_runs_a_schedule_and_02s_check_sees_it(tmp_path: Path) -> None:
    schedule = [[1, 1, 4], [2, 256, 0]]
    option = SpecOption(method="ngram", num_speculative_tokens=4, prompt_lookup_min=2, prompt_lookup_max=4,
                        extra={"num_speculative_tokens_per_batch_size": schedule})
    config = SweepConfig(concurrency=[1, 4], per_category=1, max_tokens=48, warmup_requests=1,
                         categories=["code_editing", "rag_qa"])
    run = Run.create("it-schedule", {}, kind="test", run_dir=tmp_path / "schedule")
    with serve_target(ServerTarget(option=option, dtype="float32"), run) as live:
        assert (live.identity.speculative_config or {}).get("num_speculative_tokens_per_batch_size") == schedule
        measure_sweep(live.endpoint, live.model, config, run, plan=plan_sweep(config), arm="ngram", progress=False)
    check = schedule_check(run.path, schedule)
    print(check.to_string(index=False), check.attrs["verdict"])
    assert check.attrs["ok"], check.attrs["verdict"]
    off = check[check["k"] == 0].iloc[0]
    assert off["steps"] > 0 and off["steps_with_accepted_drafts"] == 0
