"""The seeds' case from shipped data: the H200 curve against the reference, and the loss band."""

from __future__ import annotations

from pathlib import Path

import pytest

from speclab.moe import workbook as mw
from speclab.params import MoESpecParams

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gpu():
    return mw.gpu_bench_frame(MoESpecParams(cpu_bench=False))


def test_shipped_h200_curve_records_the_machine_and_agrees_with_the_reference(gpu) -> None:
    machine = gpu.attrs["machine"]
    assert machine["gpu_name"] == "NVIDIA H200" and machine["torch"] and machine["cuda"] and machine["date_utc"]
    assert set(gpu["shape"]) == {"kimi-k2.5", "qwen3-30b-a3b"}
    ref = mw.reference_comparison(gpu)
    uniform = ref[ref["routing"] == "uniform"]
    # uniform routing: within 10 % of 1.91 / 3.60 / 6.88 (same distinct experts, same line)
    assert (uniform["diff_pct"].abs() < 10).all(), uniform
    curve = mw.curve_for(gpu, "kimi-k2.5")
    small = curve.fit_table().query("tokens <= 16")
    assert small["residual_pct"].abs().max() < 5  # time tracks distinct experts linearly


def test_reference_zipf_needs_a_steeper_exponent_than_ours() -> None:
    table = mw.zipf_matching_reference(samples=150)
    assert table.loc[table["closest"], "zipf_s"].iloc[0] >= 2.0


def test_the_seeds_band_is_reproduced_from_shipped_data(gpu) -> None:
    params = MoESpecParams(cpu_bench=False, acceptance_baseline_run=str(ROOT / "tests/data/predict/f32-baseline"),
                           budgets=[8, 32])
    scenario = mw.load_scenario(params)
    acceptance = mw.ngram_acceptance(params, scenario)
    assert acceptance["measured"] and 1.1 < acceptance["tokens_per_step"] < 1.5  # reasoning: low, not alpha 0.5
    curve = mw.curve_for(gpu, "kimi-k2.5")
    table = mw.seeds_case(params, scenario, curve, [mw.parse_routing("uniform", 384, 8)], acceptance)
    ngram = table[(table["option"] == "ngram k=4") & (table["budget"] == "none")].set_index("concurrency")
    band = ngram["within_measured_band"]
    assert band.any() and band[[16, 32]].all()  # 9-26 % slower where batches are large
    assert ngram.loc[1, "predicted_speedup"] > ngram.loc[128, "predicted_speedup"]
    budgeted = table[table["budget"] != "none"]
    assert set(budgeted["strategy"]) == {"substitution", "truncation"} and budgeted["predicted_tok_s"].gt(0).all()
    best = mw.best_budgets(table)
    assert set(best["best_strategy"]) <= {"substitution", "truncation", "-"}
    eagle = best[best["option"].str.startswith("eagle3")].set_index("concurrency")
    assert eagle.loc[1, "speedup_no_budget"] > 1.3
    assert (best["speedup_best_budget"] >= best["speedup_no_budget"] - 1e-9).all()


def test_explain_seeds_moe_prints_budgets(capsys) -> None:
    from speclab.cli import main

    code = main(["explain-seeds", "--moe", "--moe-baseline", str(ROOT / "tests/data/predict/f32-baseline")])
    out = capsys.readouterr().out
    assert code == 0 and "measured H200 verify curve" in out
    assert "best_budget" in out and "borrowed" in out and "replayed" in out
