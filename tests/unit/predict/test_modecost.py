"""Speculative mode's own cost: the table of engines, versions and methods, and its parts."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from speclab.predict import modecost
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







HOST = {"cpu_model": "AMD EPYC", "isa": "AVX-512", "cpus": 2}


class FakeEngine:
    """Decode steps of the embedded server as bench-spec-mode sees them: each fresh start of a
    server runs at its own speed (a log-normal factor of ``instance_sd``), and a speculative
    server that never drafts pays ``mode_ms`` of its own plus ``proposer_ms`` a step."""

    def __init__(self, step_ms: dict[int, float], instance_sd: float, mode_ms: float, proposer_ms: float,
                 seed: int = 1) -> None:
        self.step_ms, self.sd, self.mode_ms, self.proposer_ms = step_ms, instance_sd, mode_ms, proposer_ms
        self.rng = np.random.default_rng(seed)

    def arms(self, rounds: int) -> pd.DataFrame:
        rows = []
        for round_ in range(rounds):
            for arm in ("baseline", "nodraft"):
                speed = float(self.rng.lognormal(0.0, self.sd))  # one server instance
                for c, step in self.step_ms.items():
                    extra = self.mode_ms + self.proposer_ms if arm == "nodraft" else 0.0
                    rows.append({"arm": arm, "round": round_ + 1, "concurrency": c,
                                 "server_tpot_ms": step * speed + extra})
        return pd.DataFrame(rows)


def test_known_mode_cost_and_instance_spread_are_recovered_from_a_fake_engine() -> None:
    engine = FakeEngine({1: 25.0, 4: 40.0, 8: 60.0}, instance_sd=0.03, mode_ms=2.0, proposer_ms=0.05, seed=3)
    summary = modecost.summarise_mode_cost(engine.arms(rounds=200))
    assert summary.attrs["instance_sd"] == pytest.approx(0.03, rel=0.1)
    for row in summary.itertuples():
        # the cost is recovered within its own two standard errors, and those are honest
        assert abs(row.mode_cost_ms - 2.05) <= 2 * row.mode_cost_se_ms
        assert row.mode_cost_se_ms == pytest.approx(0.03 * math.sqrt(2 / 200) * row.baseline_step_ms, rel=0.2)
    # the recovered cost, shipped for this host class, prices the residual once the proposer is out
    entry = {"host_class": "AMD EPYC, AVX-512, 2 CPUs", "dtype": "bfloat16", "instance_sd": summary.attrs["instance_sd"],
             "by_concurrency": [{**r, "proposer_ms": 0.05} for r in summary.to_dict("records")]}
    proposer = {"cpu": "AMD EPYC", "server_cpu": True, "rows": [
        {"method": "ngram", "k": 4, "batch": 4, "median_ms": 0.05, "p90_ms": 0.07}]}
    cost = modecost.embedded_parts("ngram", 4, 4, 40.0, proposer=proposer, host=HOST, dtype="torch.bfloat16",
                                   measurements=[entry])
    parts = {p.name: p for p in cost.parts}
    assert parts["proposer"].label == "measured" and (parts["proposer"].low, parts["proposer"].high) == (0.05, 0.07)
    assert parts["residual"].label == "measured" and parts["residual"].low < 2.0 < parts["residual"].high
    # a CPU engine loses no scheduling overlap and no CUDA-graph mode, and says why
    assert parts["async_scheduling_lost"].ms(40.0) == (0.0, 0.0) and "platforms/cpu.py" in parts[
        "async_scheduling_lost"].source
    assert parts["cuda_graph_mode"].ms(40.0) == (0.0, 0.0) and not cost.unknown


def test_an_unmeasured_host_class_borrows_the_widest_measurement_as_assumed() -> None:
    narrow = {"host_class": "A, AVX-512, 2 CPUs", "dtype": "bfloat16", "instance_sd": 0.02, "by_concurrency": [
        {"concurrency": 1, "baseline_step_ms": 20.0, "mode_cost_ms": 0.5, "mode_cost_se_ms": 0.2,
         "mode_cost_fraction": 0.025}]}
    wide = {"host_class": "B, AVX2, 2 CPUs", "dtype": "bfloat16", "instance_sd": 0.06, "by_concurrency": [
        {"concurrency": 1, "baseline_step_ms": 70.0, "mode_cost_ms": -5.0, "mode_cost_se_ms": 3.0,
         "mode_cost_fraction": -5 / 70}]}
    cost = modecost.embedded_parts("suffix", 8, 1, 30.0, proposer=None, host={"cpu_model": "C", "isa": "AVX2", "cpus": 4},
                                   dtype="bfloat16", measurements=[narrow, wide])
    residual = next(p for p in cost.parts if p.name == "residual")
    assert residual.label == "assumed" and residual.unit == "fraction"
    assert residual.ms(30.0) == pytest.approx(((-5 - 1.645 * 3) / 70 * 30, (-5 + 1.645 * 3) / 70 * 30))
    assert cost.unknown and "never measured" in cost.unknown[0]
    proposer = next(p for p in cost.parts if p.name == "proposer")
    assert proposer.label == "assumed" and "not timed" in proposer.source
    # the instance spread: measured where the class was, else the widest (never below the default)
    sd, source = modecost.instance_spread({"cpu_model": "A", "isa": "AVX-512", "cpus": 2}, "torch.bfloat16",
                                          embedded=True, measurements=[narrow, wide])
    assert sd == 0.02 and source.startswith("measured")
    sd, source = modecost.instance_spread({"cpu_model": "C", "isa": "AVX2", "cpus": 4}, "bfloat16", embedded=True,
                                          measurements=[narrow, wide])
    assert sd == 0.06 and source.startswith("assumed")
    sd, source = modecost.instance_spread(HOST, "bfloat16", embedded=False, measurements=[narrow, wide])
    assert sd == pytest.approx(0.035) and source.startswith("borrowed")
