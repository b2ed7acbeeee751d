"""speclab.predict.compare: the paired bootstrap speedup, its verdict, the losslessness check, and
comparisons a changed host load or a client stall contaminated."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from speclab.predict.compare import (
    FASTER,
    SLOWER,
    TOO_FEW,
    UNCLEAR,
    detectable_divergence,
    host_load_by_arm,
    judge_losslessness,
    load_contamination,
    losslessness,
    losslessness_verdict,
    paired_speedups,
    self_divergence,
    speedup_cell,
    verdict,
)


def _arm(speeds: dict[str, float], *, concurrency: int = 1, tokens: int = 100, category: str = "code",
         token_ids: dict[str, list[int]] | None = None) -> pd.DataFrame:
    rows = []
    for prompt_id, tok_s in speeds.items():
        e2e = tokens / tok_s
        rows.append({"concurrency": concurrency, "repeat": 0, "prompt_id": prompt_id, "category": category,
                     "ok": True, "output_tokens": tokens, "e2e_s": e2e, "tpot_s": e2e / tokens, "ttft_s": 0.05,
                     "token_ids": (token_ids or {}).get(prompt_id, [1, 2, 3]), "text": "abc"})
    return pd.DataFrame(rows)


def test_verdict_needs_the_whole_interval_on_one_side_of_one() -> None:
    assert verdict(1.05, 1.40) == FASTER
    assert verdict(0.70, 0.95) == SLOWER
    assert verdict(0.90, 1.10) == UNCLEAR
    assert verdict(None, 1.2) == TOO_FEW and verdict(float("nan"), 1.2) == TOO_FEW


def test_a_uniform_1_5x_speedup_is_measured_exactly_with_a_tight_interval() -> None:
    rng = np.random.default_rng(1)
    base_speeds = {f"p{i}": float(s) for i, s in enumerate(rng.uniform(20, 40, 12))}
    base = _arm(base_speeds)
    treat = _arm({k: v * 1.5 for k, v in base_speeds.items()})
    table = paired_speedups(base, treat, n_resamples=500)
    row = table[(table["category"] == "all") & (table["concurrency"] == 1)].iloc[0]
    assert row["pairs"] == 12
    assert row["speedup"] == pytest.approx(1.5)
    assert row["ci_low"] == pytest.approx(1.5) and row["ci_high"] == pytest.approx(1.5)
    assert row["verdict"] == FASTER


def test_noisy_pairs_give_an_interval_that_contains_the_truth_and_a_slowdown_is_called_slower() -> None:
    rng = np.random.default_rng(7)
    base_speeds = {f"p{i}": float(s) for i, s in enumerate(rng.uniform(20, 40, 30))}
    base = _arm(base_speeds)
    treat = _arm({k: v * 0.8 * rng.uniform(0.9, 1.1) for k, v in base_speeds.items()})
    cell = speedup_cell(base.merge(treat, on=["concurrency", "repeat", "prompt_id"], suffixes=("_base", "_treat")),
                        n_resamples=1000)
    assert cell["ci_low"] < 0.8 * 1.02 and cell["ci_high"] > 0.8 * 0.98
    assert cell["ci_high"] < 1.0 and cell["verdict"] == SLOWER


def test_one_pair_has_no_interval_and_failed_requests_are_not_paired() -> None:
    base = _arm({"p0": 30.0, "p1": 30.0})
    treat = _arm({"p0": 45.0, "p1": 60.0})
    treat.loc[treat["prompt_id"] == "p1", "ok"] = False
    row = paired_speedups(base, treat).query("category == 'all'").iloc[0]
    assert row["pairs"] == 1 and row["speedup"] == pytest.approx(1.5)
    assert row["verdict"] == TOO_FEW


def test_categories_and_concurrencies_are_separate_cells() -> None:
    base = pd.concat([_arm({"a": 30.0, "b": 30.0}, category="code"),
                      _arm({"c": 30.0, "d": 30.0}, category="story"),
                      _arm({"e": 30.0, "f": 30.0}, category="code", concurrency=4)])
    treat = pd.concat([_arm({"a": 60.0, "b": 60.0}, category="code"),
                       _arm({"c": 30.0, "d": 30.0}, category="story"),
                       _arm({"e": 36.0, "f": 36.0}, category="code", concurrency=4)])
    table = paired_speedups(base, treat, n_resamples=200).set_index(["category", "concurrency"])["speedup"]
    assert table[("code", 1)] == pytest.approx(2.0)
    assert table[("story", 1)] == pytest.approx(1.0)
    assert table[("code", 4)] == pytest.approx(1.2)
    assert table[("all", 1)] == pytest.approx(4 / 3)  # pooled: 400 tokens in 13.3 s vs 10 s


def test_losslessness_compares_token_ids_and_reports_the_first_difference() -> None:
    base = _arm({"p0": 30.0, "p1": 30.0}, token_ids={"p0": [5, 6, 7, 8], "p1": [1, 2, 3]})
    treat = _arm({"p0": 40.0, "p1": 40.0}, token_ids={"p0": [5, 6, 9, 8], "p1": [1, 2, 3]})
    table = losslessness(base, treat).set_index("prompt_id")
    assert not table.loc["p0", "identical"] and table.loc["p0", "first_difference_at"] == 2
    assert table.loc["p1", "identical"] and table.loc["p1", "compared"] == "token_ids"
    assert losslessness_verdict(table.reset_index(), "float32").startswith("NOT lossless: 1 of 2")
    # bf16 without the baseline's own rerun: no longer "expected", it says how to check
    assert "recheck in float32" in losslessness_verdict(table.reset_index(), "bfloat16")
    same = losslessness(base, base)
    assert losslessness_verdict(same, "float32").startswith("Lossless: all 2")


def _divergence(differ: int, total: int) -> pd.DataFrame:
    return pd.DataFrame({"identical": [i >= differ for i in range(total)],
                         "first_difference_at": [5.0 if i < differ else None for i in range(total)]})


def test_bf16_divergence_is_judged_against_the_baselines_own_rerun() -> None:
    noise = self_divergence(_divergence(3, 16))
    assert noise == {"pairs": 16, "identical": 13, "first_difference_median": 5.0}
    # a quarter differ where the baseline's own rerun differed in 3 of 16: bf16 rounding
    within = losslessness_verdict(_divergence(10, 40), "bfloat16", noise)
    assert "within the bfloat16 noise" in within and "differed in 3 of 16" in within
    # nearly all differ: a broken server fails, with the float32 recipe
    broken = losslessness_verdict(_divergence(38, 40), "bfloat16", noise)
    assert broken.startswith("NOT lossless beyond bfloat16 noise: 38 of 40") and "dtype: float32" in broken
    # a baseline that never differs from itself: half differing is a failure; a quarter, with 16
    # reruns, is not yet beyond a fluke at p < 0.01 (p = 0.024) but is a finding, never "noise"
    steady = self_divergence(_divergence(0, 16))
    assert losslessness_verdict(_divergence(20, 40), "bfloat16", steady).startswith("NOT lossless")
    finding = judge_losslessness(_divergence(10, 40), "bfloat16", steady)
    assert finding.kind == "suspect" and "noise" not in finding.sentence.split(":")[0].replace("than bfloat16 noise", "")
    assert finding.sentence.startswith("More divergence than bfloat16 noise explains: 10 of 40")
    assert "p = 0.024" in finding.sentence and "dtype: float32" in finding.sentence


def test_the_check_states_what_divergence_it_can_detect() -> None:
    # float32: any difference fails, so 40 pairs catch 4 % with 80 % power (1 - 0.2 ** (1 / 40))
    assert detectable_divergence(40) == pytest.approx(1 - 0.2 ** (1 / 40))
    lossless = judge_losslessness(_divergence(0, 40), "float32")
    assert lossless.kind == "lossless" and "4 % or more (80 % power)" in lossless.sentence
    # bf16 against a steady baseline (0 of 16): 40 pairs need x* differing to fail at p < 0.01
    rate = detectable_divergence(40, 0, 16)
    assert rate is not None and 0.2 < rate < 0.6
    from scipy import stats

    needed = next(x for x in range(41) if stats.fisher_exact([[x, 40 - x], [0, 16]], alternative="greater")[1] < 0.01)
    assert stats.binom.sf(needed - 1, 40, rate) == pytest.approx(0.8, abs=1e-6)
    # too few pairs for any divergence to fail
    assert detectable_divergence(2, 1, 2) is None
    assert "too few" in judge_losslessness(_divergence(1, 2), "bfloat16", self_divergence(_divergence(1, 2))).sentence


def _levels(*foreign: float, steal: float = 0.0) -> pd.DataFrame:
    return pd.DataFrame({"concurrency": list(range(1, len(foreign) + 1)),
                         "host_load": [{"foreign_cpu_cores": f, "cpu_steal_pct": steal} for f in foreign]})


def test_a_comparison_under_changed_load_is_called_contaminated() -> None:
    quiet = {"baseline": _levels(0.05, 0.1), "ngram": _levels(0.1, 0.05)}
    assert load_contamination(quiet) is None
    noisy = {"baseline": _levels(0.05, 0.1), "ngram": _levels(0.7, 0.9)}
    sentence = load_contamination(noisy)
    assert sentence is not None and sentence.startswith("CONTAMINATED") and "ngram" in sentence
    assert "\n" not in sentence
    stolen = load_contamination({"baseline": _levels(0.1, steal=12.0), "ngram": _levels(0.1)})
    assert stolen is not None and "steal" in stolen
    table = host_load_by_arm(noisy).set_index("arm")
    assert table.loc["ngram", "foreign_cpu_cores_mean"] == pytest.approx(0.8)
    # runs recorded before host load existed: nothing to say, no error
    assert load_contamination({"a": pd.DataFrame({"concurrency": [1]}), "b": _levels(0.9)}) is None


def _probed(*probe_ms: float) -> pd.DataFrame:
    return pd.DataFrame({"concurrency": list(range(1, len(probe_ms) + 1)),
                         "host_load": [{"foreign_cpu_cores": 0.02, "cpu_steal_pct": 0.0, "host_probe_ms": p}
                                       for p in probe_ms]})


def test_a_host_that_ran_slower_during_one_arm_is_named() -> None:
    steady = {"baseline": _probed(10.0, 10.4, 9.9), "ngram": _probed(10.3, 10.1, 10.6)}
    assert load_contamination(steady) is None
    slowed = {"baseline": _probed(10.0, 10.4, 9.9), "ngram": _probed(12.8, 13.1, 12.9)}
    sentence = load_contamination(slowed)
    assert sentence is not None and sentence.startswith("CONTAMINATED")
    assert "28 % slower during ngram than during baseline" in sentence  # 12.93 / 10.1, the means
    assert host_load_by_arm(slowed).set_index("arm").loc["ngram", "host_probe_ms_median"] == pytest.approx(12.9)


def test_the_disturbed_ci_calibration_pair_is_called_contaminated() -> None:
    # the host-load records of a real pair CI measured (docs/data): no foreign process, no steal, yet
    # the host probe read the baseline arm 24 % slower (means; 3.7 standard errors), and its steps at
    # c = 2 read 68-83 ms
    data = Path(__file__).parents[3] / "docs/data/ci-2026-12-04-disturbed-calibration-pair.csv"
    table = pd.read_csv(data, comment="#")
    levels = {run: pd.DataFrame({"concurrency": rows["concurrency"].tolist(),
                                 "host_load": rows[["foreign_cpu_cores", "cpu_steal_pct", "host_probe_ms"]]
                                 .to_dict("records")})
              for run, rows in table.groupby("run", sort=False)}
    sentence = load_contamination(levels)
    assert sentence is not None
    assert "24 % slower during 134633-it-replay-baseline than during 134834-it-replay-ngram" in sentence
    assert "more cores" not in sentence and "steal" not in sentence  # only the probe saw it


def test_probes_that_swing_within_both_arms_are_not_a_slower_host() -> None:
    # a real pair of 2026-12-04 14:31 UTC (2-core AMD EPYC, float32, c = 1 and 2): the probes swing
    # 19-33 ms within each arm, the medians read 29 % apart and the means 15 % apart, 1.4 standard
    # errors; the fit of that pair explained its points to 3 ms
    swinging = {"baseline": _probed(30.2, 18.9, 28.6, 33.4, 19.7, 27.8, 20.0, 24.3),
                "ngram": _probed(27.4, 19.9, 20.3, 19.4, 19.9, 21.5, 20.2, 28.4)}
    assert load_contamination(swinging) is None
    # the same ratio from steady probes is a slower host
    steady = {"baseline": _probed(*[25.4] * 4), "ngram": _probed(22.0, 22.1, 22.2, 22.1)}
    assert "15 % slower during baseline" in (load_contamination(steady) or "")
    # with fewer than three probes an arm's scatter is unknown, and the ratio alone decides
    few = {"baseline": _probed(30.2, 18.9), "ngram": _probed(20.0, 21.0)}
    assert "20 % slower during baseline" in (load_contamination(few) or "")  # 24.55 / 20.5


def _lagged(*max_lag_s: float) -> pd.DataFrame:
    return pd.DataFrame({"concurrency": list(range(1, len(max_lag_s) + 1)),
                         "harness": [{"p99_s": 0.001, "max_s": lag} for lag in max_lag_s]})


def test_a_client_stall_during_an_arm_is_named() -> None:
    # every level of a quiet host lagged <= 0.1 s; a stall of a second lost a stream's timing
    assert load_contamination({"baseline": _lagged(0.004, 0.09), "ngram": _lagged(0.01, 0.02)}) is None
    sentence = load_contamination({"baseline": _lagged(0.004, 0.09), "ngram": _lagged(0.01, 1.22)})
    assert sentence is not None and sentence.startswith("CONTAMINATED")
    assert "stalled for up to 1.22 s during ngram" in sentence and "baseline" not in sentence.split("during")[1]
    table = host_load_by_arm({"ngram": _lagged(0.01, 1.22)}).set_index("arm")
    assert table.loc["ngram", "client_stall_s_max"] == pytest.approx(1.22)
