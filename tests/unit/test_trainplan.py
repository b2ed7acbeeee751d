"""Option D plan arithmetic against the published anchors (sources in docs/eagle3.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from speclab.eagle3.plan import (
    DataPlan,
    StepTime,
    TargetShape,
    Throughput,
    estimate_plan,
    hidden_state_bytes_per_token,
    shipped_step_times,
    step_time_from_record,
    write_plan,
)
from speclab.errors import SpeclabError

KIMI = TargetShape.from_config({"text_config": {"hidden_size": 7168, "num_hidden_layers": 61,
                                                "vocab_size": 163840}}, "Kimi-K2.5")
LLAMA8B = TargetShape(name="Llama-3.1-8B", hidden_size=4096, num_hidden_layers=32, vocab_size=128256)
STEP = StepTime(device="test", step_s=0.5, tokens_per_step=2048, ttt_steps=7, draft_vocab=32000)
FAST = Throughput(prefill_tokens_per_s=20_000, decode_tokens_per_s=1_000, gpus_per_replica=8, gpu_hour_usd=2.0)


def test_llama_8b_8k_sample_is_268_mb_and_50k_samples_13_tb_offline() -> None:
    data = DataPlan(samples=50_000, tokens_per_sample=8192, capture="offline")
    plan = estimate_plan(LLAMA8B, data, STEP, FAST)
    assert plan.bytes_per_sample == 8192 * 4 * 4096 * 2 == 268_435_456  # speculators: ~268 MB
    assert plan.storage_bytes / 1e12 == pytest.approx(13.4, abs=0.05)  # speculators: ~13 TB


def test_kimi_is_57_kb_per_token_470_mb_per_8k_sample_and_34_tb_for_600m_tokens() -> None:
    assert hidden_state_bytes_per_token(7168, DataPlan()) == 57_344
    offline = estimate_plan(KIMI, DataPlan(samples=300_000, tokens_per_sample=2048, capture="offline"), STEP, FAST)
    assert offline.storage_bytes / 1e12 == pytest.approx(35.2, abs=0.1)  # 600M tokens x 57 KB, ~34 TiB
    assert estimate_plan(KIMI, DataPlan(tokens_per_sample=8192), STEP, FAST).bytes_per_sample / 1e6 == pytest.approx(469.8, abs=0.1)
    online = estimate_plan(KIMI, DataPlan(capture="online"), STEP, FAST)
    assert online.storage_bytes == 0.0


def test_gpu_hours_time_and_cost_follow_the_step_time_and_throughput() -> None:
    data = DataPlan(samples=1000, tokens_per_sample=2048, epochs=3, capture="online", answer_tokens_per_sample=500)
    plan = estimate_plan(KIMI, data, STEP, FAST)
    assert plan.train_gpu_hours == pytest.approx(3 * 1000 * 0.5 / 3600)  # one step per sample
    # online capture prefills every epoch; answers are generated once
    assert plan.datagen_hours == pytest.approx((3 * 2_048_000 / 20_000 + 500_000 / 1_000) / 3600)
    assert plan.cost_usd == pytest.approx((plan.datagen_hours * 8 + plan.train_gpu_hours) * 2.0)


def test_the_measured_h200_step_puts_the_lightseek_recipe_within_2x_of_its_training_budget() -> None:
    """lightseekorg/kimi-k2.5-eagle3: 2 phases, ~300k samples each, 3 epochs (a reproduction's
    report), 16 training H200s x ~14 h per phase = ~448 training GPU-hours."""
    record = shipped_step_times()
    assert "H200" in record["device"]
    step = step_time_from_record(record, "kimi-k25-full-vocab-seq2048-ttt7")
    assert 0.05 < step.step_s < 5.0
    plan = estimate_plan(KIMI, DataPlan(samples=600_000, tokens_per_sample=2048, epochs=3), step, FAST)
    assert 0.5 < plan.train_gpu_hours / 448 < 2.0


def test_the_plan_file_holds_the_estimate_anchors_and_risks(tmp_path: Path) -> None:
    plan = estimate_plan(KIMI, DataPlan(), STEP, FAST)
    text = write_plan(tmp_path, plan).read_text()
    assert (tmp_path / "next-steps-eagle.md").exists()
    assert "57.3 KB" in text and "268 MB" in text and "32 H200" in text and "1.13-1.24x" in text
    assert "Vocabulary mismatch" in text and "version drift" in text
    assert plan.table().set_index("quantity").loc["hidden_state_bytes_per_token", "value"] == 57_344


def test_unknown_cases_and_incomplete_configs_are_one_sentence() -> None:
    with pytest.raises(SpeclabError, match="no measured case"):
        step_time_from_record(shipped_step_times(), "nope")
    with pytest.raises(SpeclabError, match="has no vocab_size"):
        TargetShape.from_config({"hidden_size": 1, "num_hidden_layers": 1}, "x")
