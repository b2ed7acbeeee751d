"""Option D plan arithmetic against the published anchors (sources in docs/eagle3.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from speclab.eagle3.plan import (
    DataPlan,
    HeadShape,
    StepTime,
    TargetShape,
    Throughput,
    estimate_plan,
    fmt_bytes,
    fmt_count,
    fmt_hours,
    hidden_state_bytes_per_token,
    render_plan,
    scaled_step_time,
    shipped_step_times,
    step_time_from_record,
    training_flops_per_token,
    write_plan,
)
from speclab.errors import SpeclabError

KIMI_CONFIG = {"text_config": {"hidden_size": 7168, "num_hidden_layers": 61, "vocab_size": 163840,
                               "num_attention_heads": 64, "num_key_value_heads": 64, "intermediate_size": 18432}}
KIMI = TargetShape.from_config(KIMI_CONFIG, "Kimi-K2.5")
# SmolLM2-135M-Instruct's config.json (the embedded model)
SMOL_CONFIG = {"hidden_size": 576, "num_hidden_layers": 30, "vocab_size": 49152, "num_attention_heads": 9,
               "num_key_value_heads": 3, "intermediate_size": 1536}
SMOL = TargetShape.from_config(SMOL_CONFIG, "SmolLM2-135M")
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


def test_hours_and_cost_follow_the_step_time_and_throughput() -> None:
    data = DataPlan(samples=1000, tokens_per_sample=2048, epochs=3, capture="online", answer_tokens_per_sample=500)
    plan = estimate_plan(KIMI, data, STEP, FAST)
    assert plan.train_hours == pytest.approx(3 * 1000 * 0.5 / 3600)  # one step per sample
    # online capture prefills every epoch; answers are generated once
    assert plan.datagen_hours == pytest.approx((3 * 2_048_000 / 20_000 + 500_000 / 1_000) / 3600)
    assert plan.datagen_device_hours == pytest.approx(plan.datagen_hours * 8)
    assert plan.cost_usd == pytest.approx((plan.datagen_hours * 8 + plan.train_hours) * 2.0)


def test_regenerated_answers_need_a_decode_speed() -> None:
    slow = Throughput(prefill_tokens_per_s=1000)
    with pytest.raises(SpeclabError, match="plan_decode_tokens_per_s"):
        estimate_plan(KIMI, DataPlan(answer_tokens_per_sample=100), STEP, slow)
    kept = estimate_plan(KIMI, DataPlan(answer_tokens_per_sample=0, samples=10, tokens_per_sample=100), STEP, slow)
    assert kept.datagen_hours == pytest.approx(1000 / 1000 / 3600)


def test_a_cpu_step_is_cpu_hours_here_never_gpu_hours_or_dollars() -> None:
    cpu = StepTime(device="cpu: x86_64 x2 threads", device_type="cpu", step_s=2.0, tokens_per_step=512,
                   ttt_steps=3, draft_vocab=32000)
    here = Throughput(prefill_tokens_per_s=500, decode_tokens_per_s=50, on_gpu=False, gpus_per_replica=1)
    plan = estimate_plan(SMOL, DataPlan(samples=100, answer_tokens_per_sample=10), cpu, here)
    assert plan.gpu_hours == 0 and plan.cost_usd is None
    table = plan.table().set_index("quantity")
    assert table.loc["training", "unit"] == "CPU-hours on this machine"
    assert "GPU" not in table.loc["training", "reads"] and "not priced" in table.loc["cost", "reads"]
    text = render_plan(plan)
    assert "CPU-hours on this machine" in text and "$" not in text.split("## Published anchors")[0]
    assert "GPU-hours" not in plan.headline().split("cost")[0]
    # a GPU step beside CPU data generation: only the GPU-hours are priced, and the plan says so
    mixed = estimate_plan(SMOL, DataPlan(samples=100, answer_tokens_per_sample=10), STEP, here)
    assert mixed.cost_usd == pytest.approx(mixed.train_hours * here.gpu_hour_usd)
    assert "data generation not priced" in mixed.cost_text()


def test_sizes_read_in_their_unit_never_0_tb() -> None:
    assert fmt_bytes(57_344) == "57.3 KB" and fmt_bytes(614.4e9) == "614.4 GB" and fmt_bytes(35.2e12) == "35.2 TB"
    small = estimate_plan(SMOL, DataPlan(samples=1000, tokens_per_sample=2048, capture="offline"), STEP, FAST)
    disk = small.table().set_index("quantity").loc["disk for captured states (offline)", "reads"]
    assert disk == "9.4 GB"  # 1000 x 2048 tokens x 4 x 576 x 2 bytes
    assert fmt_hours(0.25) == "15 min" and fmt_hours(3013.4, "GPU-hours") == "3,013 GPU-hours"
    assert fmt_count(614.4e6) == "614.4 M"


def test_flop_scaling_reproduces_the_shipped_cases_from_each_other() -> None:
    """Each measured H200 case predicted from every other by training FLOPs per token lands
    within 0.7-1.4x of its measured step: the basis for scaling a step to another head."""
    record = shipped_step_times()
    cases = [c for c in record["cases"] if "step_s" in c]
    for source in cases:
        for target in cases:
            if source is target:
                continue
            one = {**record, "cases": [source]}
            head = HeadShape.from_case(target)
            scaled = scaled_step_time(one, head, case=source["name"])
            predicted = scaled.step_s * target["tokens_per_step"] / source["tokens_per_step"] \
                * training_flops_per_token(head, target["seq_len"], target["ttt_steps"]) \
                / training_flops_per_token(head, source["seq_len"], source["ttt_steps"])
            assert 0.7 < predicted / target["step_s"] < 1.4, (source["name"], target["name"])


def test_the_h200_step_is_scaled_to_the_target_head_and_says_so() -> None:
    record = shipped_step_times()
    smol = HeadShape.for_target(SMOL_CONFIG, draft_vocab=49152)
    step = scaled_step_time(record, smol, tokens_per_sample=2048, target_name="SmolLM2")
    assert step.on_gpu and "H200" in step.device
    assert step.name == "llama31-8b-vocab32k-seq2048-ttt7"  # the nearest measured head
    assert step.draft_vocab == 32000 and 0.01 < step.scale < 0.2
    assert "scaled x" in step.scaling and "a floor" in step.scaling and "SmolLM2" in step.scaling
    # the drafter's own config shapes the head when it is a head for this target
    kimi_drafter = {"hidden_size": 7168, "num_attention_heads": 64, "num_key_value_heads": 64, "head_dim": 128,
                    "intermediate_size": 12288, "vocab_size": 163840, "draft_vocab_size": 163840}
    head = HeadShape.for_target(KIMI_CONFIG, draft_vocab=163840, drafter_config=kimi_drafter)
    exact = scaled_step_time(record, head, case="kimi-k25-full-vocab-seq2048-ttt7")
    assert exact.scaling == "" and exact.step_s == pytest.approx(0.4826, abs=1e-3)  # measured as it is
    own = HeadShape.for_target(KIMI_CONFIG, draft_vocab=163840)  # the target's MLP (18,432) instead
    assert own.intermediate == 18432 and scaled_step_time(record, own, case=exact.name).scale > 1


def test_the_measured_h200_step_puts_the_lightseek_recipe_within_2x_of_its_training_budget() -> None:
    """lightseekorg/kimi-k2.5-eagle3: 2 phases, ~300k samples each, 3 epochs (a reproduction's
    report), 16 training H200s x ~14 h per phase = ~448 training GPU-hours."""
    record = shipped_step_times()
    assert "H200" in record["device"]
    step = step_time_from_record(record, "kimi-k25-full-vocab-seq2048-ttt7")
    assert 0.05 < step.step_s < 5.0 and step.on_gpu
    plan = estimate_plan(KIMI, DataPlan(samples=600_000, tokens_per_sample=2048, epochs=3), step, FAST)
    assert 0.5 < plan.train_hours / 448 < 2.0


def test_the_plan_file_holds_the_estimate_anchors_and_risks(tmp_path: Path) -> None:
    plan = estimate_plan(KIMI, DataPlan(), STEP, FAST)
    text = write_plan(tmp_path, plan).read_text()
    assert (tmp_path / "next-steps-eagle.md").exists()
    assert "57.3 KB" in text and "268 MB" in text and "32 H200" in text and "1.13-1.24x" in text
    assert "Vocabulary mismatch" in text and "version drift" in text
    assert plan.table().set_index("quantity").loc["hidden states per token", "value"] == 57_344


def test_unknown_cases_and_incomplete_configs_are_one_sentence() -> None:
    with pytest.raises(SpeclabError, match="no measured case"):
        step_time_from_record(shipped_step_times(), "nope")
    with pytest.raises(SpeclabError, match="has no vocab_size"):
        TargetShape.from_config({"hidden_size": 1, "num_hidden_layers": 1}, "x")
