"""The what-if's prediction: a published case's figures, flip values that really flip, the seeds'
sentence, the JSON row shape, the harness bound the published baselines set."""

from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
import pytest
import yaml

from speclab.whatif import hardware as hw
from speclab.whatif.cases import CASES_FILE
from speclab.whatif.predict import WhatIf, predict
from speclab.whatif.scenario import scenario_from_dict
from speclab.whatif.seeds import explain_seeds, seeds_statements
from speclab.whatif.step import HARNESS_EXCESS_US, MOE_EXCESS_FROM_BASELINES_US, mode_at, prepare, step_times


@lru_cache(maxsize=1)
def shipped_cases() -> list[dict]:
    return list(yaml.safe_load(CASES_FILE.read_text()))


def case(prefix: str) -> dict:
    return next(c for c in shipped_cases() if c["name"].startswith(prefix))


@lru_cache(maxsize=1)
def seeds() -> WhatIf:
    return explain_seeds()


def test_a_published_case_predicted() -> None:
    # DeepSeek-V3 + MTP k=2 on 16 H200 (lmsys blog): 51.0 -> 81.5 tok/s a rank, AL 2.18 published
    result = predict(scenario_from_dict(case("DeepSeek-V3-0324 + MTP (3-token window, k=2)")))
    row = result.row(32)
    assert row.speedup == pytest.approx(1.56, abs=0.02)
    assert (row.low, row.high) == pytest.approx((1.38, 1.75), abs=0.02)
    assert row.low <= 1.598 <= row.high and row.verdict == "win"
    assert row.baseline_ms == pytest.approx(1e3 * 32 / 816.0) and row.baseline_from == "published"
    # both arms ran without overlap scheduling (stated by the source): nothing lost, only the residual
    assert "the source states overlap off in the baseline and off with speculation" in row.parts["mode"]["source"]
    # DP attention over 16 ranks: 2 sequences a GPU, so the residual reaches the K=0 tax at 2 (6.6 %)
    residual = next(p for p in mode_at(result.deployment, 32).parts if p.name == "residual")
    assert residual.high == pytest.approx(0.0656)
    assert row.parts["fixed"]["label"] == "fitted"
    assert row.parts["compute"]["spec_ms"] > row.parts["compute"]["baseline_ms"]  # MLA at 64k context


def test_a_flip_value_flips_the_verdict_when_applied() -> None:
    result = seeds()
    dep = result.deployment
    for row in result.rows:
        for flip in row.flips:
            if flip.value is None or flip.input in {"mode_share", "acceptance_length"} or flip.distance > 2:
                continue
            below = flip.value * 0.97 if flip.value > 0 else flip.value - 0.01
            above = flip.value * 1.03 if flip.value > 0 else flip.value + 0.01
            s_below = float(step_times(dep, {**result.mids, flip.input: below}, row.concurrency).speedup)
            s_above = float(step_times(dep, {**result.mids, flip.input: above}, row.concurrency).speedup)
            flipped, kept = (s_below, s_above) if flip.direction == "below" else (s_above, s_below)
            assert (flipped >= 1.0) != (row.speedup >= 1.0), (row.concurrency, flip)
            assert (kept >= 1.0) == (row.speedup >= 1.0), (row.concurrency, flip)


def test_closed_form_flips_of_acceptance_and_mode_cost() -> None:
    result = seeds()
    dep = result.deployment
    row = result.row(128)
    al = next(f for f in row.flips if f.input == "acceptance_length")
    assert float(step_times(dep, result.mids, 128, acceptance=al.value).speedup) == pytest.approx(1.0)
    mode = next(f for f in row.flips if f.input == "mode_share")
    assert float(step_times(dep, result.mids, 128, mode_ms=mode.value).speedup) == pytest.approx(1.0)


def test_the_seeds_sentence() -> None:
    text = seeds_statements(seeds())
    assert len(text) == 8
    assert text[-1] == (
        "n-gram wins at c=128 (1.03x, 90 % 0.84-1.37, unclear); it would lose only if the acceptance length is below "
        "1.88 tokens, or speculative mode's own cost is above 21.0 ms a step, or the all-reduce bus bandwidth is "
        "below 31.7 GB/s. Decided by the acceptance length: the flip lies inside its range (1.55-2.33 tokens, "
        "assumed).")
    assert text[0].startswith("n-gram wins at c=1 (1.37x, 90 % 1.14-1.78); it would lose only if the acceptance "
                              "length is below 1.41 tokens")
    assert "No input flips it inside its range" in text[0]


def test_the_seeds_busbw_decides_between_the_sources_low_and_tuned_figures() -> None:
    # issue 34: the answer rested on 22.2 GB/s, the lowest figure of its source; 37.6-41.1 tuned
    result = seeds()
    flip = next(f for f in result.row(128).flips if f.input == "allreduce_bus_gb_s")
    assert 22.2 < flip.value < 41.1 and flip.direction == "below"


def test_json_rows_in_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    from speclab.cli import main
    from speclab.whatif.seeds import SEEDS_SCENARIO

    assert main(["whatif", "--scenario", str(SEEDS_SCENARIO), "--json", "--draws", "300"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["name"].startswith("Kimi-K2.5") and len(body["rows"]) == 8
    row = body["rows"][0]
    assert {"concurrency", "speedup", "low", "high", "verdict", "parts"} <= set(row)
    assert row["verdict"] in {"win", "lose", "unclear"} and row["low"] <= row["speedup"] <= row["high"]
    assert all(p["label"] in {"measured", "fitted", "borrowed", "assumed"} for p in row["parts"].values())
    assert row["acceptance"]["label"] == "assumed"


def test_explain_seeds_prints_the_verdicts_and_flips(capsys: pytest.CaptureFixture[str]) -> None:
    from speclab.cli import main

    assert main(["explain-seeds", "--whatif-only"]) == 0
    out = capsys.readouterr().out
    assert "What would flip each verdict" in out and "n-gram wins at c=128" in out
    assert "acceptance     assumed" in out


def test_published_baselines_rule_out_the_held_out_harness() -> None:
    # the bound MOE_EXCESS_FROM_BASELINES_US rests on: per anchored MoE case, the largest per-expert
    # kernel cost its published baseline allows (fixed cost 0, the machine at its fastest)
    grid = np.linspace(0.0, 30.0, 601)
    allowed = {}
    for data in shipped_cases():
        try:
            dep = prepare(scenario_from_dict(data))
        except Exception:
            continue
        if not dep.anchors or not dep.arch.is_moe:
            continue
        v = dict(dep.mids())
        v.update(hbm_efficiency=0.9, compute_efficiency=0.7, moe_layer_fixed_us=0.0, routing_spread=0.5)
        if dep.link is not None:
            v.update(allreduce_latency_us=dep.input("allreduce_latency_us").low,
                     allreduce_bus_gb_s=dep.input("allreduce_bus_gb_s").high)
        ok = np.asarray(step_times(dep, {**v, "moe_expert_us": grid}, dep.scenario.concurrencies[0]).consistent)
        allowed[data["name"][:40]] = grid[ok].max() if ok.any() else 0.0
    held_out = max(HARNESS_EXCESS_US.values())
    ruling = {k: x for k, x in allowed.items() if x < held_out}
    assert len(ruling) >= 3  # several published baselines rule the held-out harness out
    assert min(ruling.values()) == pytest.approx(1.8, abs=0.3)
    assert min(ruling.values()) <= MOE_EXCESS_FROM_BASELINES_US <= min(ruling.values()) + 0.5


def test_allreduce_table_and_ring() -> None:
    link = hw.interconnect("pcie5", hw.gpu("RTX PRO 6000"))
    assert hw.allreduce_us(link, 1024, 8, 24.1, 22.2) == pytest.approx(24.1, abs=0.1)
    big = 262144 + 22.2e9 * 1e-3  # 1 ms of ring bytes past the table
    assert hw.allreduce_us(link, big, 8, 24.1, 22.2) == pytest.approx(28.0 + 1.75e3, rel=1e-3)
    assert hw.interconnect("nvlink", hw.gpu("B200")).name == "nvlink5"


def test_the_drafter_overhead_is_specdecode_bench_draft_phase_less_its_reads() -> None:
    from speclab.whatif.step import draft_pass_overhead_ms

    # 2.135 ms / 3 passes, less one EAGLE layer + 128k LM head of Llama-3.1-8B (743 M params, 16 bits) read at
    # 70 % and 90 % of 3.35 TB/s
    low, high = draft_pass_overhead_ms()
    assert (low, high) == pytest.approx((0.0777, 0.2186), abs=1e-3)
    dep = prepare(scenario_from_dict(case("MiniMax-M3 FP8 + EAGLE3")))
    item = dep.input("draft_pass_ms")
    assert (item.low, item.high, item.label) == (0.08, 0.22, "borrowed")
    assert "paid by both arms" in item.source


def test_a_hybrid_model_on_vllm_pays_its_linear_attention_layers_host_work() -> None:
    result = predict(scenario_from_dict(case("Qwen3.5-397B-A17B NVFP4 + MTP=2")), with_sensitivity=False)
    dep = result.deployment
    assert dep.arch.linear_layers == 45
    parts = {p.name: p for p in dep.mode.parts}
    assert parts["linear_attention_host"].high == pytest.approx(3.9)
    # vLLM >= 0.17 (the first release serving Qwen3.5) keeps MTP's async scheduling: nothing lost
    assert parts["async_scheduling_lost"].high == 0.0 and not dep.mode.unknown
    assert "linear_attention_host" in result.row(1).parts["mode"]["source"]


def test_the_interval_holds_two_server_instances_spread(monkeypatch: pytest.MonkeyPatch) -> None:
    import speclab.whatif.predict as predict_module
    from speclab.options import INSTANCE_SD

    assert predict_module.RESTART_SD == pytest.approx(2 ** 0.5 * INSTANCE_SD) == pytest.approx(0.0495, abs=1e-4)
    scenario = scenario_from_dict(case("MiniMax-M3 FP8 + EAGLE3"))
    with_restart = predict(scenario, with_sensitivity=False)
    assert any("two server instances' spread" in n for n in with_restart.notes)
    monkeypatch.setattr(predict_module, "RESTART_SD", 0.0)
    parts_only = predict(scenario, with_sensitivity=False)
    a, b = with_restart.row(1), parts_only.row(1)
    assert a.speedup == pytest.approx(b.speedup)  # the point prediction does not move
    assert a.high - a.low > b.high - b.low + 0.05


def test_dspark_on_a_deepseek_v4_checkpoint_drafts_through_its_stages() -> None:
    # dspark_target_layer_ids [40, 41, 42]: three stages of the target's layer shape, routed experts included
    dep = prepare(scenario_from_dict(case("DeepSeek-V4-Flash-0731 + DSpark fixed K=7")))
    assert dep.arch.dspark_stages == 3 and dep.drafter is not None
    assert (dep.drafter.layers, dep.drafter.moe_layers, dep.drafter.experts) == (3, 3, 256)
    assert (dep.passes, dep.tokens_per_pass) == (1, 7.0)
    assert any("3 stages" in n and "#29538" in n for n in dep.notes)
    # a block drafter without the checkpoint's stage list keeps one dense layer (assumed)
    data = case("DeepSeek-V4-Flash-0731 + DSpark fixed K=7")
    config = {k: v for k, v in data["model"]["config"].items() if k != "dspark_target_layer_ids"}
    dense = prepare(scenario_from_dict({**data, "model": {**data["model"], "config": config}}))
    assert dense.drafter is not None and (dense.drafter.layers, dense.drafter.moe_layers) == (1, 0)
