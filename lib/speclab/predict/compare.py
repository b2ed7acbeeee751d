"""Paired comparisons of two arms that ran the same plan: speedup with a bootstrap CI.

The treatment arm reran exactly the baseline's prompts at the same levels, so each prompt
is its own control. A cell's speedup is the ratio of per-request token rates,
``(sum tokens / sum E2E)`` treatment over baseline, over the cell's prompt pairs; the 95 %
interval comes from ``scipy.stats.bootstrap`` resampling prompt pairs (paired=True).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from scipy import stats

from speclab.predict import steptrace

PAIR_KEYS = ["concurrency", "repeat", "prompt_id"]
FASTER, SLOWER, UNCLEAR, TOO_FEW = "faster", "slower", "no clear difference", "too few prompts"


def _usable(frame: pd.DataFrame) -> pd.DataFrame:
    if frame.empty:
        return frame
    ok = frame[frame["ok"].astype(bool)] if "ok" in frame else frame
    ok = ok[(ok["output_tokens"].fillna(0) > 0) & (ok["e2e_s"].fillna(0) > 0)]
    return ok


def with_occurrence(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` plus ``occurrence``: 0 for the first copy of a prompt at a concurrency and
    repeat, 1 for the second, ... (a prompt set smaller than ``per_category`` repeats
    prompts within a level). Copies are numbered in plan order (request ids carry
    ``-copyN``), falling back to send order, so both arms number them alike."""
    if frame.empty:
        return frame.assign(occurrence=pd.Series(dtype=int))
    ranked = frame.assign(_copy=0)
    if "request_id" in frame:
        copy = frame["request_id"].astype(str).str.extract(r"-copy(\d+)$")[0]
        ranked["_copy"] = pd.to_numeric(copy, errors="coerce").fillna(0).astype(int)
    order = ["_copy"] + (["send_time_s"] if "send_time_s" in frame else [])
    ranked = ranked.sort_values(order, kind="stable")
    ranked["occurrence"] = ranked.groupby(PAIR_KEYS, sort=False).cumcount()
    return ranked.drop(columns="_copy").sort_index()


def pair_requests(baseline: pd.DataFrame, treatment: pd.DataFrame) -> pd.DataFrame:
    """One row per prompt occurrence measured by both arms at the same concurrency and repeat.

    Each copy pairs once: merging on the prompt id alone would pair 4 copies with 4 copies
    as 16 "pairs", and the bootstrap interval would be far too narrow.
    """
    keys = [*PAIR_KEYS, "occurrence"]
    cols = keys + ["category", "output_tokens", "e2e_s", "tpot_s", "ttft_s"]
    base = _usable(baseline)
    treat = _usable(treatment)
    if base.empty or treat.empty:
        return pd.DataFrame(columns=[*keys, "category"])
    # Number copies among all requests (failed ones too), so a failure does not shift the pairing.
    base = with_occurrence(baseline).loc[base.index]
    treat = with_occurrence(treatment).loc[treat.index]
    merged = base[cols].merge(
        treat[cols].drop(columns=["category"]), on=keys, suffixes=("_base", "_treat"))
    merged["speed_base_tok_s"] = merged["output_tokens_base"] / merged["e2e_s_base"]
    merged["speed_treat_tok_s"] = merged["output_tokens_treat"] / merged["e2e_s_treat"]
    return merged


def _ratio_statistic(bt: np.ndarray, be: np.ndarray, tt: np.ndarray, te: np.ndarray,
                     axis: int = -1) -> np.ndarray:
    return (tt.sum(axis=axis) / te.sum(axis=axis)) / (bt.sum(axis=axis) / be.sum(axis=axis))


def verdict(ci_low: float | None, ci_high: float | None) -> str:
    """faster / slower when the whole interval is on one side of 1, else no clear difference."""
    if ci_low is None or ci_high is None or np.isnan(ci_low) or np.isnan(ci_high):
        return TOO_FEW
    if ci_low > 1.0:
        return FASTER
    if ci_high < 1.0:
        return SLOWER
    return UNCLEAR


def speedup_cell(pairs: pd.DataFrame, confidence: float = 0.95, n_resamples: int = 2000,
                 seed: int = 0, instance_sd: float = 0.0) -> dict[str, Any]:
    """Speedup and bootstrap CI for one cell's prompt pairs.

    ``instance_sd``: the relative spread of one server instance's speed from another's; where
    the arms ran on different instances (a restart separates them) each bootstrap draw is
    multiplied by the ratio of two such factors, so the interval holds that spread too.
    """
    bt = pairs["output_tokens_base"].to_numpy(float)
    be = pairs["e2e_s_base"].to_numpy(float)
    tt = pairs["output_tokens_treat"].to_numpy(float)
    te = pairs["e2e_s_treat"].to_numpy(float)
    n = len(pairs)
    point = float(_ratio_statistic(bt, be, tt, te)) if n else float("nan")
    low = high = None
    if n >= 2:
        result = stats.bootstrap(
            (bt, be, tt, te), _ratio_statistic, paired=True, vectorized=True,
            confidence_level=confidence, n_resamples=n_resamples, method="percentile",
            random_state=np.random.default_rng(seed))
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
        if instance_sd > 0:
            rng = np.random.default_rng(seed + 1)
            draws = result.bootstrap_distribution * rng.lognormal(0.0, instance_sd, n_resamples) / rng.lognormal(
                0.0, instance_sd, n_resamples)
            tail = (1.0 - confidence) / 2.0
            low, high = (float(q) for q in np.nanquantile(draws, [tail, 1.0 - tail]))
    return {
        "pairs": n,
        "base_tok_s_per_request": float(bt.sum() / be.sum()) if n else None,
        "treat_tok_s_per_request": float(tt.sum() / te.sum()) if n else None,
        "speedup": point,
        "ci_low": low,
        "ci_high": high,
        "ci_width_pct": (high - low) / point * 100 if low is not None and high is not None and point else None,
        "verdict": verdict(low, high),
        "base_tpot_s_median": float(np.median(pairs["tpot_s_base"].dropna())) if n else None,
        "treat_tpot_s_median": float(np.median(pairs["tpot_s_treat"].dropna())) if n else None,
    }


def paired_speedups(baseline: pd.DataFrame, treatment: pd.DataFrame, *, confidence: float = 0.95,
                    n_resamples: int = 2000, seed: int = 0, instance_sd: float = 0.0) -> pd.DataFrame:
    """Per category x concurrency (plus category 'all'): speedup, CI and verdict
    (``instance_sd``: see :func:`speedup_cell`; give it when the arms ran on two server instances)."""
    pairs = pair_requests(baseline, treatment)
    rows: list[dict[str, Any]] = []
    if pairs.empty:
        return pd.DataFrame(columns=["category", "concurrency", "pairs", "speedup", "ci_low",
                                     "ci_high", "verdict"])
    for concurrency, level in pairs.groupby("concurrency"):
        groups = [("all", level)] + list(level.groupby("category"))
        for category, cell in groups:
            rows.append({"category": category, "concurrency": int(concurrency),
                         **speedup_cell(cell, confidence, n_resamples, seed, instance_sd)})
    frame = pd.DataFrame(rows)
    order = {"all": 0}
    frame["_o"] = frame["category"].map(lambda c: order.get(c, 1))
    return frame.sort_values(["_o", "category", "concurrency"]).drop(columns="_o").reset_index(drop=True)


def losslessness(baseline: pd.DataFrame, treatment: pd.DataFrame) -> pd.DataFrame:
    """Per prompt pair: are the greedy outputs identical, and where do they first differ?"""
    keys = [*PAIR_KEYS, "occurrence"]
    cols = [*keys, "category", "token_ids", "text"]
    baseline, treatment = with_occurrence(baseline), with_occurrence(treatment)
    base = baseline[baseline["ok"].astype(bool)][[c for c in cols if c in baseline]]
    treat = treatment[treatment["ok"].astype(bool)][[c for c in cols if c in treatment]]
    merged = base.merge(treat.drop(columns=["category"], errors="ignore"), on=keys,
                        suffixes=("_base", "_treat"))
    rows = []
    for row in merged.itertuples(index=False):
        a, b = getattr(row, "token_ids_base", None), getattr(row, "token_ids_treat", None)
        if isinstance(a, list) and isinstance(b, list):
            same = a == b
            first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
            if first is None and not same:
                first = min(len(a), len(b))
            compared = "token_ids"
        else:
            same = row.text_base == row.text_treat
            first = None if same else next(
                (i for i, (x, y) in enumerate(zip(row.text_base, row.text_treat, strict=False)) if x != y),
                min(len(row.text_base), len(row.text_treat)))
            compared = "text"
        rows.append({"concurrency": row.concurrency, "repeat": row.repeat, "prompt_id": row.prompt_id,
                     "category": row.category, "identical": bool(same), "first_difference_at": first,
                     "compared": compared})
    return pd.DataFrame(rows)


# A speculative arm's divergence must exceed the baseline's own (same prompts at another batch
# size) with at most this chance of a fluke (one-sided Fisher exact test) to be called a failure.
DIVERGENCE_P_MAX = 0.01
FLOAT32_RECHECK = ("recheck in float32: rerun 01-baseline and this option with dtype: float32 "
                   "(embedded) or --dtype float32 on both servers, where greedy outputs must be identical")


def self_divergence(table: pd.DataFrame) -> dict[str, Any]:
    """How often greedy outputs differ when the *baseline* reruns its own prompts (a
    :func:`losslessness` table of the baseline against its rerun): bf16's own noise floor."""
    pairs = len(table)
    identical = int(table["identical"].sum()) if pairs else 0
    firsts = table.loc[~table["identical"].astype(bool), "first_difference_at"].dropna() if pairs else []
    return {"pairs": pairs, "identical": identical,
            "first_difference_median": float(np.median(firsts)) if len(firsts) else None}


def rerun_divergence(run_dir: str | Path, rerun_dir: str | Path, top_level: int) -> dict[str, Any]:
    """:func:`self_divergence` of a baseline's top level (``top_level``) against its own
    self-check rerun (:mod:`speclab.measure.selfcheck`), read from the two run folders."""
    from speclab.runfolder import load_run

    base = load_run(run_dir).requests
    base = base[base["level"] == top_level].assign(concurrency=0, repeat=0)
    again = load_run(rerun_dir).requests.assign(concurrency=0, repeat=0)
    return self_divergence(losslessness(base, again))


# Below DIVERGENCE_P_MAX a divergence is a failure; below this it is a finding the reader is told
# about (more divergence than the baseline's own, not yet beyond a fluke at this sample size).
DIVERGENCE_P_SUSPECT = 0.10
DETECTION_POWER = 0.8


class Losslessness(NamedTuple):
    """The losslessness check's outcome: a ``kind`` code reads it, the ``sentence`` says it.

    ``kind``: ``lossless`` (every output identical), ``not_lossless`` (a failure: any
    difference in float32, or in bf16 beyond the baseline's own divergence at p <
    :data:`DIVERGENCE_P_MAX`), ``suspect`` (bf16: more divergence than the baseline's own at
    p < :data:`DIVERGENCE_P_SUSPECT`, a finding but not yet a failure), ``within_noise``,
    ``unchecked`` (bf16 with no baseline rerun to compare against) or ``no_pairs``.
    ``detectable_rate``: the divergence rate this check catches with 80 % power at its sample
    size (None where it cannot say)."""

    kind: str
    sentence: str
    detectable_rate: float | None = None


def detectable_divergence(pairs: int, baseline_differ: int | None = None, baseline_pairs: int | None = None,
                          power: float = DETECTION_POWER) -> float | None:
    """The smallest share of an option's answers that must differ from the baseline's for the
    check to call it a failure with probability ``power``, given ``pairs`` compared answers.

    Float32 (no baseline rerun given): any difference fails, so ``1 - (1 - power)^(1/pairs)``.
    Bf16: against the baseline's own ``baseline_differ`` of ``baseline_pairs``, the fewest
    differing answers x* that the one-sided Fisher test calls a failure at
    :data:`DIVERGENCE_P_MAX`, and the rate r with ``P(Binomial(pairs, r) >= x*) = power``.
    None when no count of ``pairs`` could fail (too few pairs)."""
    if pairs <= 0:
        return None
    if baseline_pairs is None:
        return float(1.0 - (1.0 - power) ** (1.0 / pairs))
    d0, n0 = int(baseline_differ or 0), int(baseline_pairs)
    needed = next((x for x in range(pairs + 1) if x / pairs > d0 / n0 and stats.fisher_exact(
        [[x, pairs - x], [d0, n0 - d0]], alternative="greater")[1] < DIVERGENCE_P_MAX), None)
    if needed is None:
        return None
    from scipy.optimize import brentq

    return float(brentq(lambda r: stats.binom.sf(needed - 1, pairs, r) - power, 1e-9, 1 - 1e-9))


def judge_losslessness(table: pd.DataFrame, dtype: str | None,
                       baseline_self: dict[str, Any] | None = None) -> Losslessness:
    """Exact in float32; in bf16 judged against how much the baseline diverges from itself
    (``baseline_self``, :func:`self_divergence`), so a broken server can fail. Every sentence
    says what divergence rate the check could have caught at this sample size."""
    if table.empty:
        return Losslessness("no_pairs", "No prompt pairs to compare.")
    same = int(table["identical"].sum())
    total = len(table)
    differ = total - same
    bf16 = not (dtype and "float32" in dtype)
    if not bf16 or same == total and not baseline_self:
        rate = float(1.0 - (1.0 - DETECTION_POWER) ** (1.0 / total))  # any difference fails
        power = f"with {total} pairs it catches a divergence rate of {100 * rate:.0f} % or more (80 % power)"
        if same == total:
            return Losslessness("lossless", f"Lossless: all {total} greedy outputs identical to the baseline's "
                                f"({dtype or '?'}); {power}.", rate)
        return Losslessness("not_lossless", f"NOT lossless: {differ} of {total} greedy outputs differ from the "
                            "baseline's in float32, where they must be identical; investigate the server.", rate)
    if not baseline_self or not baseline_self.get("pairs"):
        return Losslessness("unchecked", f"{same} of {total} greedy outputs identical; {differ} differ in "
                            f"{dtype or 'bf16'}, and the baseline recorded no rerun of its own to tell rounding from a "
                            f"broken server: {FLOAT32_RECHECK}.")
    n0 = int(baseline_self["pairs"])
    d0 = n0 - int(baseline_self["identical"])
    bf16_rate = detectable_divergence(total, d0, n0)
    power = ("at these sample sizes the check catches a divergence rate of "
             f"{100 * bf16_rate:.0f} % or more (80 % power)" if bf16_rate is not None
             else "these samples are too few for the check to call any divergence a failure")
    if same == total:
        return Losslessness("lossless", f"Lossless: all {total} greedy outputs identical to the baseline's "
                            f"({dtype or '?'}); {power}.", bf16_rate)
    _, p_value = stats.fisher_exact([[differ, same], [d0, n0 - d0]], alternative="greater")
    own = f"the baseline rerun against itself differed in {d0} of {n0}"
    more = differ / total > d0 / n0
    if more and p_value < DIVERGENCE_P_MAX:
        return Losslessness("not_lossless", f"NOT lossless beyond {dtype or 'bf16'} noise: {differ} of {total} "
                            f"greedy outputs differ from the baseline's, where {own} (p = {p_value:.2g}); "
                            f"{FLOAT32_RECHECK}.", bf16_rate)
    if more and p_value < DIVERGENCE_P_SUSPECT:
        return Losslessness("suspect", f"More divergence than {dtype or 'bf16'} noise explains: {differ} of {total} "
                            f"greedy outputs differ from the baseline's, where {own} (p = {p_value:.2g}); not yet "
                            f"beyond a fluke at this sample size ({power}), so {FLOAT32_RECHECK} before trusting "
                            "its speed.", bf16_rate)
    return Losslessness("within_noise", f"{same} of {total} greedy outputs identical; {differ} differ, within the "
                        f"{dtype or 'bf16'} noise ({own}; p = {p_value:.2g}; {power}). For an exact check, "
                        f"{FLOAT32_RECHECK}.", bf16_rate)


def losslessness_verdict(table: pd.DataFrame, dtype: str | None,
                         baseline_self: dict[str, Any] | None = None) -> str:
    """:func:`judge_losslessness`'s sentence."""
    return judge_losslessness(table, dtype, baseline_self).sentence


# --------------------------------------------------------------------------- host load

# Neighbour load (cores used by processes outside speclab's tree) that may differ between arms
# before a comparison is called contaminated: a quarter of a core moved a 2-core host's
# single-stream TPOT by several percent.
FOREIGN_CPU_TOLERANCE_CORES = 0.25
STEAL_TOLERANCE_PCT = 5.0
# How far apart two arms' mean host-speed probes may be before the host itself is called
# slower during one of them (the probe's own spread on a quiet host: docs/predictor.md)...
HOST_PROBE_TOLERANCE = 0.12
# ...and how many standard errors of that difference, when each arm has enough probes to show its
# scatter: one probe is an instant, and on a 2-core host probes taken with the server idle swing
# 20-32 ms in phases of a tenth of a second to seconds (docs/predictor.md, Host load).
HOST_PROBE_STANDARD_ERRORS = 3.0
HOST_PROBE_MIN_COUNT = 3


def host_load_by_arm(levels: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per arm (label -> its levels table): the neighbour load over its measured levels."""
    rows = []
    for arm, frame in levels.items():
        loads = [h for h in frame.get("host_load", []) if isinstance(h, dict)]
        foreign = [h["foreign_cpu_cores"] for h in loads if h.get("foreign_cpu_cores") is not None]
        steal = [h["cpu_steal_pct"] for h in loads if h.get("cpu_steal_pct") is not None]
        probe = [h["host_probe_ms"] for h in loads if h.get("host_probe_ms") is not None]
        lags = [float(h["max_s"]) for h in frame.get("harness", []) if isinstance(h, dict) and h.get("max_s") is not None]
        rows.append({"arm": arm, "levels": len(loads),
                     "foreign_cpu_cores_mean": float(np.mean(foreign)) if foreign else None,
                     "foreign_cpu_cores_max": float(np.max(foreign)) if foreign else None,
                     "cpu_steal_pct_max": float(np.max(steal)) if steal else None,
                     "host_probe_ms_median": float(np.median(probe)) if probe else None,
                     "host_probe_ms_mean": float(np.mean(probe)) if probe else None,
                     "host_probe_ms_sd": float(np.std(probe, ddof=1)) if len(probe) > 1 else None,
                     "host_probes": len(probe),
                     "client_stall_s_max": float(np.max(lags)) if lags else None})
    return pd.DataFrame(rows, columns=["arm", "levels", "foreign_cpu_cores_mean", "foreign_cpu_cores_max",
                                       "cpu_steal_pct_max", "host_probe_ms_median", "host_probe_ms_mean",
                                       "host_probe_ms_sd", "host_probes", "client_stall_s_max"])


def _probes_apart(slow: pd.Series, fast: pd.Series) -> bool:
    """Whether two arms' mean host probes differ by more than their own scatter explains
    (:data:`HOST_PROBE_STANDARD_ERRORS` standard errors of the difference). With fewer than
    :data:`HOST_PROBE_MIN_COUNT` probes in an arm its scatter is unknown, and the ratio alone decides."""
    if min(slow["host_probes"], fast["host_probes"]) < HOST_PROBE_MIN_COUNT:
        return True
    error = math.sqrt(slow["host_probe_ms_sd"] ** 2 / slow["host_probes"]
                      + fast["host_probe_ms_sd"] ** 2 / fast["host_probes"])
    return slow["host_probe_ms_mean"] - fast["host_probe_ms_mean"] > HOST_PROBE_STANDARD_ERRORS * error


def load_contamination(levels: dict[str, pd.DataFrame]) -> str | None:
    """One sentence when the machine's load differed between the arms compared, else None
    (:func:`load_problems` lists what differed).

    Arms measured under different neighbour load are not comparable on a shared host: the
    difference in load shows up as a difference in speed that no option caused.
    """
    problems = load_problems(levels)
    if not problems:
        return None
    return ("CONTAMINATED comparison: " + "; ".join(problems)
            + ". Speed differences may come from the load, not the option; rerun the arms on a quiet machine.")


def load_problems(levels: dict[str, pd.DataFrame]) -> list[str]:
    """What differed in the machine's load between the arms compared (each a clause), or none."""
    by_arm = host_load_by_arm(levels)
    table = by_arm.dropna(subset=["foreign_cpu_cores_mean"])
    problems = []
    if len(table) >= 2:
        spread = table["foreign_cpu_cores_mean"].max() - table["foreign_cpu_cores_mean"].min()
        if spread > FOREIGN_CPU_TOLERANCE_CORES:
            worst = table.sort_values("foreign_cpu_cores_mean").iloc[-1]
            problems.append(f"other processes used {spread:.2f} more cores during some arms than others "
                            f"(most during {worst['arm']}: {worst['foreign_cpu_cores_mean']:.2f} cores)")
    steal = by_arm["cpu_steal_pct_max"].dropna()
    if len(steal) and steal.max() > STEAL_TOLERANCE_PCT:
        problems.append(f"the hypervisor took up to {steal.max():.0f} % of the CPU (steal)")
    probes = by_arm.dropna(subset=["host_probe_ms_mean"]).sort_values("host_probe_ms_mean")
    if len(probes) >= 2:
        fast, slow = probes.iloc[0], probes.iloc[-1]
        ratio = slow["host_probe_ms_mean"] / fast["host_probe_ms_mean"]
        if ratio > 1 + HOST_PROBE_TOLERANCE and _probes_apart(slow, fast):
            problems.append(f"the host itself ran {100 * (ratio - 1):.0f} % slower during {slow['arm']} than during "
                            f"{fast['arm']} (a fixed CPU probe before each level, mean of {slow['host_probes']} and "
                            f"{fast['host_probes']}; no process of this host explains it: a neighbour on the same "
                            "physical cores, or a lower clock)")
    stalls = by_arm.dropna(subset=["client_stall_s_max"])
    stalled = stalls[stalls["client_stall_s_max"] > steptrace.CLIENT_STALL_TOLERANCE_S]
    if len(stalled):
        worst = stalled.sort_values("client_stall_s_max").iloc[-1]
        problems.append(f"the client's event loop stalled for up to {worst['client_stall_s_max']:.2f} s during "
                        f"{', '.join(stalled['arm'])} (the streams it was reading arrive late and in a burst, so "
                        "their decode times are wrong)")
    return problems
