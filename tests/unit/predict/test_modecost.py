"""Speculative mode's own cost: the table of engines, versions and methods, and its parts."""

from __future__ import annotations

import math

import pytest

from speclab.predict.modecost import (
    OVERLAP_LOST_FRACTION,
    PIPELINE_ROUND_FRACTION,
    mode_cost_parts,
    normalise_method,
    overlap_status,
)


def test_vllm_032_keeps_async_for_model_drafters_and_drops_it_for_cpu_proposers() -> None:
    for method in ("eagle", "eagle3", "mtp", "ngram_gpu", "draft_model", "dspark", "dflash", "deepseek_mtp"):
        assert overlap_status("vllm", "0.32.0", method).status == "kept", method
    for method in ("ngram", "suffix"):
        status = overlap_status("vllm", "0.32", method)
        assert status.status == "lost"
        assert "VllmConfig.__post_init__" in status.source


def test_sglang_056_drops_overlap_and_later_main_keeps_it() -> None:
    assert overlap_status("sglang", "0.5.6", "eagle3").status == "lost"
    assert overlap_status("sglang", "0.5.6", "NGRAM").status == "lost"
    assert overlap_status("sglang", "0.5.9", "eagle").status == "unknown"
    assert overlap_status("sglang", "0.6.0", "mtp").status == "kept"


def test_unknown_version_engine_and_method() -> None:
    assert overlap_status("vllm", None, "mtp").status == "unknown"
    assert overlap_status("vllm", "rocm nightly-a8d1aa9", "dspark").status == "unknown"
    cost = mode_cost_parts("slimserve", "c67d245", "mtp")
    assert cost.refusal is not None and "slimserve" in cost.refusal and not cost.parts
    cost = mode_cost_parts("trtllm", None, "eagle3")
    assert cost.refusal is not None and "eagle3" in cost.refusal


def test_version_not_given_spans_kept_and_lost() -> None:
    cost = mode_cost_parts("vllm", None, "ngram")
    lost = next(p for p in cost.parts if p.name == "async_scheduling_lost")
    assert (lost.low, lost.high, lost.label) == (0.0, OVERLAP_LOST_FRACTION[1], "assumed")
    assert cost.unknown and "unknown" in cost.unknown[0]


def test_parts_in_ms_and_fraction() -> None:
    cost = mode_cost_parts("vllm", "0.32", "ngram")
    names = [p.name for p in cost.parts]
    assert names == ["async_scheduling_lost", "proposer"]
    low, high = cost.ms(baseline_step_ms=10.0)
    assert low == pytest.approx(OVERLAP_LOST_FRACTION[0] * 10 + 0.05)
    assert high == pytest.approx(OVERLAP_LOST_FRACTION[1] * 10 + 0.5)
    assert mode_cost_parts("vllm", "0.32", "eagle3").ms(10.0) == (0.0, 0.0)
    # the residual: up to the K=0 tax, its largest reading where no concurrency is given
    assert mode_cost_parts("vllm", "0.32", "eagle3", residual=True).ms(10.0) == pytest.approx((0.0, 2.158))


def test_trtllm_ngram_is_up_to_15_percent_of_the_iteration() -> None:
    cost = mode_cost_parts("trtllm", None, "ngram")
    proposer = next(p for p in cost.parts if p.name == "proposer")
    assert proposer.ms(20.0) == pytest.approx((0.0, 3.0))


def test_dynamic_schedule_and_pipeline_parts() -> None:
    cost = mode_cost_parts("vllm", "0.32", "mtp", per_batch_schedule=True, concurrency=189)
    parts = {p.name: p for p in cost.parts}
    assert parts["cuda_graph_mode"].low == pytest.approx(0.163, abs=1e-3)
    assert parts["dynamic_schedule"].high == pytest.approx(0.2158 - 0.1628, abs=1e-3)
    pp = mode_cost_parts("vllm", None, "mtp", pipeline_parallel=4)
    parts = {p.name: p for p in pp.parts}
    assert parts["pipeline_round"].ms(16.3) == pytest.approx((25.0 - 16.3, 25.0))
    assert [round(f, 3) for f in PIPELINE_ROUND_FRACTION] == [0.534, 1.534]
    # async scheduling is off in both arms under PP on vLLM's V1 runner: nothing lost, nothing unknown
    assert parts["async_scheduling_lost"].high == 0.0 and not pp.unknown


def test_stated_overlap_overrides_the_table() -> None:
    both_off = mode_cost_parts("sglang", None, "mtp", baseline_overlap=False, option_overlap=False)
    assert both_off.ms(50.0) == (0.0, 0.0) and not both_off.unknown


def test_normalise_method() -> None:
    assert normalise_method("NEXTN") == "mtp"
    assert normalise_method("qwen3_5_mtp") == "mtp"
    assert normalise_method("STANDALONE") == "draft_model"


def test_vllm_014_to_031_keeps_async_for_eagle_and_mtp() -> None:
    # vllm-project/vllm#31998 (2026-01-08): async scheduling on by default with EAGLE/MTP, off otherwise
    for method in ("eagle", "eagle3", "mtp", "qwen3_next_mtp"):
        status = overlap_status("vllm", "0.26.0", method)
        assert status.status == "kept" and "#31998" in status.source, method
    assert overlap_status("vllm", "0.14.0", "ngram").status == "lost"
    assert overlap_status("vllm", "0.27.1", "suffix").status == "lost"
    for method in ("draft_model", "dspark", "ngram_gpu"):
        assert overlap_status("vllm", "0.27.1", method).status == "unknown", method
    assert overlap_status("vllm", "0.13.0", "mtp").status == "unknown"


def test_a_version_known_from_below() -> None:
    # a model first served by vLLM 0.17 runs on 0.17 or later: every row from there on keeps MTP's overlap
    status = overlap_status("vllm", ">=0.17", "mtp")
    assert status.status == "kept" and "every row from there on agrees" in status.source
    assert mode_cost_parts("vllm", ">=0.17", "mtp").ms(10.0) == (0.0, 0.0)
    # rows from there on disagree or are unplaced: unknown, spanning kept to lost
    assert overlap_status("vllm", ">=0.13", "mtp").status == "unknown"
    assert overlap_status("vllm", ">=0.17", "dspark").status == "unknown"
    assert overlap_status("vllm", ">=0.32", "dspark").status == "kept"
    assert overlap_status("vllm", ">=0.14", "ngram").status == "lost"
    assert overlap_status("sglang", ">=0.5.7", "mtp").status == "unknown"
    assert overlap_status("sglang", ">=0.6", "mtp").status == "kept"


def test_linear_attention_layers_under_vllm_speculation() -> None:
    # 0 (FULL graphs replay the GDN layers, vllm#51008) to 4.16 ms over 48 GDN layers (vllm#55978)
    cost = mode_cost_parts("vllm", ">=0.17", "mtp", linear_attention_layers=45)
    part = next(p for p in cost.parts if p.name == "linear_attention_host")
    assert (part.unit, part.label) == ("ms", "borrowed")
    assert (part.low, part.high) == pytest.approx((0.0, 45 * 4.16 / 48))
    assert "#55978" in part.source and "#51008" in part.source
    assert not any(p.name == "linear_attention_host" for p in mode_cost_parts("vllm", ">=0.17", "mtp").parts)
    assert not any(p.name == "linear_attention_host"
                   for p in mode_cost_parts("sglang", "0.6.0", "mtp", linear_attention_layers=45).parts)


def test_the_residual_follows_the_k0_tax_by_sequences_a_gpu() -> None:
    # vllm#49548: +6.56 % at 2 sequences, +21.58 % at 189, log-interpolated, clamped to the measured ends
    def top(c: float) -> float:
        return mode_cost_parts("vllm", "0.32", "eagle3", residual=True, concurrency=c).ms(100.0)[1]

    assert top(1) == pytest.approx(6.56) and top(2) == pytest.approx(6.56)
    assert top(189) == pytest.approx(21.58) and top(4096) == pytest.approx(21.58)
    assert top(13) == pytest.approx(6.56 + 15.02 * (math.log(13 / 2) / math.log(189 / 2)), rel=1e-6)
    part = next(p for p in mode_cost_parts("sglang", "0.6", "mtp", residual=True, concurrency=13).parts
                if p.name == "residual")
    assert part.low == 0.0 and part.label == "assumed" and "#49548" in part.source
