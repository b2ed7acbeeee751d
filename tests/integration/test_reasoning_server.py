"""Reasoning output on a real server: the embedded vLLM serving the reasoning variant of
SmolLM2 with vLLM's deepseek_r1 parser, so tokens arrive first as ``delta.reasoning``."""

from __future__ import annotations

import json

import pytest

from speclab.measure.loadgen import bench, plan_sweep
from speclab.prompts import Prompt
from speclab.runfolder import read_records
from speclab.serve.embedded import embedded_launch
from speclab.serve.launch import free_port
from speclab.serve.target import ServerTarget
from speclab.sweep import SweepConfig

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("vllm_lock")]

# Long enough answers that the variant leaves its thought (at the first comma) and answers.
PROMPTS = [Prompt(id=f"describe-{i}", category="describe", max_tokens=24,
                  messages=[{"role": "user", "content": f"Describe the city of {city} in three sentences."}])
           for i, city in enumerate(["Paris", "Rome", "Lisbon"])]


@pytest.mark.parametrize("transport", ["fast"])
def test_reasoning_tokens_are_counted_exactly_and_the_answer_is_timed_apart(tmp_path, transport: str) -> None:
    config = SweepConfig(concurrency=[1], per_category=3, warmup_requests=1, thinking=True,
                         transport=transport)
    target = ServerTarget(mode="launch", launch=embedded_launch(port=free_port(), reasoning=True))
    result = bench(target, config, run_dir=tmp_path / "run", plan=plan_sweep(config, PROMPTS), progress=False)
    rows = read_records(tmp_path / "run")
    assert len(rows) == 3 and all(r["ok"] for r in rows), [r["error"] for r in rows]
    for row in rows:
        # the server's parser split the output: reasoning first, then the answer
        assert row["reasoning_text"] and row["text"], row
        assert row["output_tokens_source"] in ("usage", "continuous_usage")
        assert row["reasoning_tokens"] >= 1 and row["answer_tokens"] >= 1
        assert row["reasoning_tokens"] + row["answer_tokens"] == row["output_tokens"]
        # time to first answer token is its own figure, after the first (reasoning) token
        assert row["ttfa_s"] > row["ttft_s"]
    level = result.levels[0]
    counters = level["server_counters"]
    # client tokens (reasoning included) = the server's generation-token delta, exactly
    assert counters["d_generation_tokens"] == sum(r["output_tokens"] for r in rows)
    assert level["reasoning_tokens"] == sum(r["reasoning_tokens"] for r in rows)
    assert level["ttfa_s_median"] > level["ttft_s_median"]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["status"] == "ok"
    assert "--reasoning-parser deepseek_r1" in manifest["server"]["launch_command"]
