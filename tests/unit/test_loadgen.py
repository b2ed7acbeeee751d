"""The load generator against a fake OpenAI server: records, levels, summary contract."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from speclab.measure.loadgen import SweepConfig, measure_sweep, plan_sweep
from speclab.prompts import load_builtin
from speclab.runfolder import LEVEL_KEYS, Plan, read_records
from speclab.runs import Run
from tests.fakes.fake_openai import FakeOpenAI


def test_plan_gives_distinct_prompts_per_level_and_interleaves_categories() -> None:
    config = SweepConfig(concurrency=[1, 4], per_category=2, categories=["code_editing", "translation"])
    plan = plan_sweep(config)
    first, second = plan.for_level(0), plan.for_level(1)
    assert len(first) == len(second) == 4
    assert not {p.prompt_id for p in first} & {p.prompt_id for p in second}
    assert [p.category for p in first][:2] == ["code_editing", "translation"]
    assert not plan.reused_prompts


def test_plan_round_trips_through_the_run_folder(tmp_path: Path) -> None:
    plan = plan_sweep(SweepConfig(concurrency=[2], per_category=1, categories=["math_reasoning"]))
    plan.save(tmp_path)
    again = Plan.load(tmp_path)
    assert [r.prompt_id for r in again.requests] == [r.prompt_id for r in plan.requests]
    assert again.prompts.keys() == plan.prompts.keys()


@pytest.mark.parametrize("workers", [1, 2])
def test_sweep_writes_records_levels_and_the_summary_contract(tmp_path: Path, workers: int) -> None:
    config = SweepConfig(concurrency=[1, 3], per_category=2, categories=["code_editing", "translation"],
                         warmup_requests=1, max_tokens=10, workers=workers)
    run = Run.create("t", {}, outputs_root=tmp_path)
    with FakeOpenAI(tokens_per_request=10, tokens_per_chunk=2) as fake:
        result = measure_sweep(fake.url + "/v1", "fake", config, run, progress=False)
        # warm-up requests went out but are not measured
        assert len(fake.bodies) == 2 * 4 + 2
    summary = json.loads((run.path / "summary.json").read_text())
    assert len(summary["levels"]) == 2
    for level in summary["levels"]:
        assert set(LEVEL_KEYS) <= set(level)
        assert level["requests"] == 4 and level["errors"] == 0
        assert level["output_tokens"] == 40
        assert level["tokens_per_chunk_mean"] == pytest.approx(2.0)
        assert level["foreign_traffic"] is False
        assert level["acceptance_rate"] is None  # no spec counters on this server
    rows = read_records(run.path)
    assert len(rows) == 8 and {r["level"] for r in rows} == {0, 1}
    assert all(r["output_tokens_source"] in ("usage", "continuous_usage") for r in rows)
    frame = pd.read_parquet(run.path / "requests.parquet")
    assert len(frame) == 8 and "ttft_s" in frame and "tpot_s" in frame
    assert len(result.records) == 8


def test_foreign_traffic_is_flagged_and_failures_are_kept(tmp_path: Path) -> None:
    config = SweepConfig(concurrency=[2], per_category=3, categories=["translation"], warmup_requests=0,
                         max_tokens=6)
    run = Run.create("t", {}, outputs_root=tmp_path)
    with FakeOpenAI(tokens_per_request=6, fail_every=3) as fake:
        fake.extra_requests = 0
        original = fake.metrics_text

        def with_tenant() -> str:
            fake.extra_requests += 1  # someone else finishes a request between scrapes
            return original()

        fake.metrics_text = with_tenant  # type: ignore[method-assign]
        result = measure_sweep(fake.url, "fake", config, run, progress=False)
    level = result.levels[0]
    assert level["errors"] == 1 and level["requests"] == 3
    assert "injected failure" in level["error_examples"][0]
    assert level["foreign_traffic"] is True


def test_poisson_rate_mode_spaces_arrivals(tmp_path: Path) -> None:
    config = SweepConfig(concurrency=[8], rate=20.0, per_category=4, categories=["translation"],
                         warmup_requests=0, max_tokens=4)
    run = Run.create("t", {}, outputs_root=tmp_path)
    with FakeOpenAI(tokens_per_request=4, delay_s=0.0) as fake:
        result = measure_sweep(fake.url, "fake", config, run, progress=False)
    sends = sorted(r.send_time_s for r in result.records)
    assert result.levels[0]["rate"] == 20.0
    assert sends[-1] - sends[0] > 0.03  # arrivals are spread, not all at t=0
    assert len(load_builtin(["translation"])) >= 4
