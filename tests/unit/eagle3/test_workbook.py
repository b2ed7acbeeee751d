"""03's tables: offline per-position counts pooled per category; counter rates pooled per run."""

from __future__ import annotations

import pandas as pd
import pytest

from speclab.eagle3.workbook import measured_acceptance, offline_table
from speclab.runfolder import RunData


def test_offline_counts_pool_rows_per_category_and_overall() -> None:
    samples = [
        {"id": "a", "category": "code", "rows": 10, "accepted_per_pos": [8, 6, 3]},
        {"id": "b", "category": "code", "rows": 30, "accepted_per_pos": [12, 6, 3]},
        {"id": "c", "category": "chat", "rows": 10, "accepted_per_pos": [2, 1, 0]},
    ]
    table = offline_table(samples).set_index("category")
    assert table.loc["code", "position_0_rate"] == pytest.approx(20 / 40)
    assert table.loc["code", "position_2_rate"] == pytest.approx(6 / 40)
    assert table.loc["all", "rows"] == 50
    assert table.loc["all", "mean_acceptance_length"] == pytest.approx(1 + 22 / 50 + 13 / 50 + 6 / 50)


def test_measured_acceptance_weights_levels_by_their_drafts() -> None:
    levels = pd.DataFrame({"server_counters": [{"d_drafts": 100, "d_accepted_per_position": [50, 20]},
                                               {"d_drafts": 300, "d_accepted_per_position": [90, 30]}, None]})
    run = RunData(path=__import__("pathlib").Path("."), manifest={}, requests=pd.DataFrame(), levels=levels)
    row = measured_acceptance(run).iloc[0]
    assert row["position_0_rate"] == pytest.approx((50 + 90) / 400)
    assert row["mean_acceptance_length"] == pytest.approx(1 + 0.35 + 0.125)


def test_predicted_speedup_follows_acceptance_verify_cost_and_draft_time(tmp_path) -> None:
    """With an explicit verify cost, speedup = L x T(B,1) / (T(B,1) + extra(B*k) + k x draft)."""
    import json
    import shutil
    from pathlib import Path

    from speclab.eagle3.workbook import predict_speedups, predicted_vs_measured_speedup
    from speclab.predict.timings import level_timings

    base = tmp_path / "baseline"
    shutil.copytree(Path(__file__).resolve().parents[2] / "data" / "predict" / "f32-baseline", base)
    (base / "cost_model.json").write_text(json.dumps(
        {"source": "explicit", "verify": {"overhead_s": 0.002, "per_token_s": 0.001, "exponent": 1.0}}))
    predicted = pd.DataFrame([{"category": "all", "mean_acceptance_length": 2.0}])
    table = predict_speedups(base, predicted, k=3, draft_step_s={"1": 0.001, "16": 0.004})
    timings = level_timings(base).drop_duplicates("concurrency").set_index("concurrency")
    for row in table.to_dict("records"):
        batch = timings.loc[row["concurrency"], "batch"]
        t1 = timings.loc[row["concurrency"], "tpot_s"]
        draft = 3 * (0.001 + (0.003 * (min(max(batch, 1), 16) - 1) / 15))
        expected = 2.0 * t1 / (t1 + 0.002 + 0.001 * batch * 3 + draft)
        assert row["predicted_speedup"] == pytest.approx(expected, rel=0.02)
    measured = pd.DataFrame([{"category": "all", "concurrency": int(table["concurrency"].iloc[0]),
                              "speedup": 1.0, "ci_low": 0.9, "ci_high": 1.1, "verdict": "no difference"}])
    both = predicted_vs_measured_speedup(table, measured)
    assert len(both) == 1 and both["error_pct"].iloc[0] == pytest.approx(100 * (both["predicted_speedup"].iloc[0] - 1))


SMOL_CONFIG = {"hidden_size": 576, "num_hidden_layers": 30, "vocab_size": 49152, "num_attention_heads": 9,
               "num_key_value_heads": 3, "intermediate_size": 1536}
KIMI_CONFIG = "params/examples/kimi-k25-8xpcie/kimi-k25-config.json"


def _recorded_baseline():
    from pathlib import Path

    from speclab.runfolder import load_run

    return load_run(Path(__file__).resolve().parents[2] / "data" / "predict" / "f32-baseline")


def test_the_embedded_plan_prices_no_cpu_hour_and_uses_the_baselines_measured_speed(tmp_path) -> None:
    """The demo's case: SmolLM2 on this machine's CPU. Data generation runs at the recorded
    baseline's speed (CPU-hours, unpriced); training is the H200 step scaled to the head."""
    from speclab.eagle3.workbook import (
        baseline_decode_tokens_per_s,
        baseline_prefill_tokens_per_s,
        option_d_plan,
    )
    from speclab.params import Eagle3Params

    base = _recorded_baseline()
    params = Eagle3Params.validate_values({"mode": "embedded", "plan_gpus_per_replica": 1})
    plan, path = option_d_plan(params, tmp_path, base, target_config=SMOL_CONFIG, target_name="smollm2-135m")
    decode, concurrency = baseline_decode_tokens_per_s(base)
    assert decode == pytest.approx(base.levels["output_tok_s"].max()) and concurrency >= 1
    assert plan.throughput.decode_tokens_per_s == pytest.approx(decode)
    assert plan.throughput.prefill_tokens_per_s == pytest.approx(baseline_prefill_tokens_per_s(base))
    assert not plan.throughput.on_gpu and plan.step.on_gpu and "H200" in plan.step.device
    assert plan.cost_usd == pytest.approx(plan.train_hours * 3.5)  # the GPU part only
    table = plan.table().set_index("quantity")
    assert table.loc["data generation", "unit"] == "CPU-hours on this machine"
    assert table.loc["training", "unit"] == "GPU-hours (NVIDIA H200)"
    text = path.read_text()
    assert "scaled x" in text and "measured by the baseline run" in text and "this machine's CPU" in text
    assert "0 TB" not in text and "0.0 TB" not in text
    # tokens regenerated per answer is a parameter: 0 keeps the dataset's answers (no decode time)
    none = Eagle3Params.validate_values({"mode": "embedded", "plan_answer_tokens_per_sample": 0})
    kept, _ = option_d_plan(none, tmp_path, base, target_config=SMOL_CONFIG, target_name="smollm2-135m")
    assert kept.datagen_hours < plan.datagen_hours and kept.throughput.decode_tokens_per_s is None


def test_a_plan_for_another_model_needs_its_speed_and_external_rates_are_gpu_hours(tmp_path) -> None:
    import json
    from pathlib import Path

    from speclab.eagle3.workbook import option_d_plan, same_model
    from speclab.errors import SpeclabError
    from speclab.params import Eagle3Params

    root = Path(__file__).resolve().parents[3]
    base = _recorded_baseline()
    other = Eagle3Params.validate_values({"mode": "embedded", "plan_target_config": str(root / KIMI_CONFIG)})
    with pytest.raises(SpeclabError, match="plan_prefill_tokens_per_s"):
        option_d_plan(other, tmp_path, base, target_config=SMOL_CONFIG, target_name="smollm2-135m")
    kimi = json.loads((root / KIMI_CONFIG).read_text())
    drafter = json.loads((root / "params/examples/kimi-k25-8xpcie/drafter-config.json").read_text())
    assert same_model(kimi, kimi) and not same_model(kimi, SMOL_CONFIG)
    given = Eagle3Params.validate_values({"mode": "embedded", "plan_target_config": str(root / KIMI_CONFIG),
                                          "plan_prefill_tokens_per_s": 20000, "plan_decode_tokens_per_s": 2000,
                                          "plan_step_time": "kimi-k25-full-vocab-seq2048-ttt7"})
    plan, _ = option_d_plan(given, tmp_path, base, target_config=SMOL_CONFIG, target_name="smollm2-135m",
                            drafter_config=drafter)
    assert plan.throughput.on_gpu and plan.datagen_device_hours == pytest.approx(plan.datagen_hours * 8)
    # the SmolLM2 drafter's shape is not used for Kimi: the head takes Kimi's own dimensions
    assert plan.step.scaling and plan.step.scale > 1
    assert plan.cost_usd == pytest.approx(plan.gpu_hours * 3.5) and not plan.unpriced
    # external mode, plan for the served Kimi with its drafter's config: the H200 step as measured,
    # the generation speed measured by (here: the recorded) baseline, all GPU-hours
    served = Eagle3Params.validate_values({"mode": "external", "endpoint": "http://kimi-box:8000/v1",
                                           "drafter": "d", "target_config": str(root / KIMI_CONFIG),
                                           "plan_step_time": "kimi-k25-full-vocab-seq2048-ttt7"})
    plan, path = option_d_plan(served, tmp_path, base, target_config=kimi, target_name="moonshotai/Kimi-K2.5",
                               drafter_config=drafter)
    assert plan.step.scaling == "" and plan.throughput.on_gpu and "the served model's server" in plan.throughput.source
    assert "$" in plan.cost_text() and "not priced" not in plan.cost_text()
