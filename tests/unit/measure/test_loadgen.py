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
    config = SweepConfig(concurrency=[1, 4], per_category=2, categories=["code_editing", "translation"],
                         rounds=1)
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
                         warmup_requests=1, max_tokens=10, workers=workers, rounds=1)
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
                         max_tokens=6, rounds=1)
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


def test_a_level_plans_rounds_of_its_concurrency_with_categories_kept_even() -> None:
    config = SweepConfig(concurrency=[1, 8], per_category=1, categories=["code_editing", "translation"], rounds=3)
    plan = plan_sweep(config)
    low, high = plan.for_level(0), plan.for_level(1)
    assert len(low) == 4  # max(1 x 2 categories, 3 rounds x 1) = 3, rounded up to whole categories: 2 each
    assert len(high) == 24  # 3 rounds x 8
    assert sum(p.category == "translation" for p in high) == 12
    # drawn in order: the high level continues after the low level's prompts, none shared
    assert not {p.prompt_id for p in low} & {p.prompt_id for p in high}
    # the same config plans the same requests (both arms of a comparison run this plan)
    assert [p.prompt_id for p in plan_sweep(config).requests] == [p.prompt_id for p in plan.requests]
    # Poisson arrivals do not fill slots: no rounds there
    poisson = plan_sweep(config.model_copy(update={"rate": 2.0}))
    assert len(poisson.for_level(1)) == 2


def test_a_closed_loop_level_reports_its_steady_window_and_achieved_in_flight(tmp_path: Path) -> None:
    config = SweepConfig(concurrency=[4], per_category=1, categories=["code_editing", "translation"],
                         warmup_requests=0, max_tokens=12, rounds=3)
    run = Run.create("t", {}, outputs_root=tmp_path)
    with FakeOpenAI(tokens_per_request=12, tokens_per_chunk=1, delay_s=0.01) as fake:
        result = measure_sweep(fake.url, "fake", config, run, progress=False)
    level = result.levels[0]
    assert level["requests"] == 12
    start, end = level["steady_window_s"]
    assert 0 < start < end
    # a closed loop refills every slot at once: four in flight throughout the window
    assert level["inflight_mean"] == pytest.approx(4.0, rel=0.1)
    assert level["inflight_below_target"] is False
    assert level["output_tok_s"] == level["output_tok_s_steady"] > 0


def test_a_level_of_one_round_never_reaches_steady_state_and_is_flagged(tmp_path: Path) -> None:
    config = SweepConfig(concurrency=[8], per_category=1, categories=["code_editing", "translation"],
                         warmup_requests=0, max_tokens=6, rounds=1)
    run = Run.create("t", {}, outputs_root=tmp_path)
    with FakeOpenAI(tokens_per_request=6) as fake:
        level = measure_sweep(fake.url, "fake", config, run, progress=False).levels[0]
    # eight requests for eight slots: all start together and the level only drains
    assert level["requests"] == 8 and level["steady_window_s"] is None
    assert level["inflight_mean"] < 0.9 * 8
    assert level["inflight_below_target"] is True


def test_level_duration_keeps_sending_the_plan_in_order_until_time_is_up(tmp_path: Path) -> None:
    config = SweepConfig(concurrency=[2], per_category=1, categories=["code_editing", "translation"],
                         warmup_requests=0, max_tokens=6, rounds=1, level_duration_s=0.6)
    run = Run.create("t", {}, outputs_root=tmp_path)
    with FakeOpenAI(tokens_per_request=6, delay_s=0.01) as fake:
        result = measure_sweep(fake.url, "fake", config, run, progress=False)
    ids = [r.request_id for r in sorted(result.records, key=lambda r: r.send_time_s)]
    assert len(ids) > 4  # more than the two planned requests: the plan repeats
    assert all(r.send_time_s < 0.6 + 0.05 for r in result.records)
    assert ids[2].endswith("-copy1")  # the second pass numbers copies, so arms pair copy n with copy n
