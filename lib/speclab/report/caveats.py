"""Caveats: what the data itself says against a number, as data (a kind and a sentence).

Every caveat carries a :class:`Kind` that code reads (the report's recommendation refuses a
contaminated comparison or an option that is not lossless by its kind, never by its wording)
and a sentence a reader reads. :func:`caveats` finds them in run folders; :func:`group_caveats`
turns them into one line per distinct sentence. Reads run folders only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import pandas as pd

from speclab.predict import compare
from speclab.runfolder import COST_MODEL_JSON, PLAN_JSON, SELF_DIVERGENCE_JSON, RunData
from speclab.runs import read_json, run_id
from speclab.urls import scrub_paths

__all__ = [
    "Caveat",
    "Kind",
    "baseline_self_divergence",
    "caveats",
    "group_caveats",
    "kinds",
    "load_shortfalls",
    "losslessness",
    "losslessness_verdict",
]


class Kind(StrEnum):
    """What a caveat is about; a decision reads this, never the sentence."""

    RUN_FAILED = "run_failed"  # the run ended with an error
    RUN_UNFINISHED = "run_unfinished"  # another run still running, or one that ended without finalising
    FOREIGN_TRAFFIC = "foreign_traffic"  # the server counted someone else's requests
    REQUEST_ERRORS = "request_errors"
    LOAD_SHORTFALL = "load_shortfall"  # a level never had its concurrency in flight
    METRICS_UNREAD = "metrics_unread"
    CACHE_RESET_REFUSED = "cache_reset_refused"
    CLIENT_LAG = "client_lag"
    SAMPLED = "sampled"  # temperature > 0
    IGNORE_EOS = "ignore_eos"
    BF16 = "bf16"
    REUSED_PROMPTS = "reused_prompts"
    CONTRADICTION = "contradiction"  # the server contradicts the declared option
    FALLBACK = "fallback"  # a prediction's source fell back to a weaker one
    NOT_LOSSLESS = "not_lossless"  # greedy outputs differ beyond what the dtype explains
    DIVERGENCE_SUSPECT = "divergence_suspect"  # more divergence than noise, not yet a failure
    DIVERGENCE_UNCHECKED = "divergence_unchecked"  # bf16 divergence with no baseline rerun to judge it
    DIVERGENCE_WITHIN_NOISE = "divergence_within_noise"
    FEW_PAIRS = "few_pairs"
    CONTAMINATED = "contaminated"  # the machine's load differed between the arms compared
    BEYOND_SWEEP = "beyond_sweep"  # a figure at a concurrency the sweep did not measure


@dataclass(frozen=True)
class Caveat:
    """One thing detected in the data that should temper a number."""

    kind: Kind
    subject: str  # the run's label (baseline, ngram k=4, ...)
    run: str  # its run id (never a local path)
    message: str
    detail: str = ""  # the kind's own finding in a clause (e.g. what load differed), for a sentence elsewhere

    def __str__(self) -> str:
        return f"{self.subject} ({self.run}): {self.message}"


def kinds(found: Iterable[Caveat]) -> set[Kind]:
    """The kinds among ``found``."""
    return {c.kind for c in found}


# --------------------------------------------------------------------------- the load a level reached


def load_shortfalls(runs: list[RunData]) -> dict[int, str]:
    """Per concurrency whose closed-loop level never had its requests in flight (below
    :data:`speclab.measure.summary.INFLIGHT_SHARE_MIN` of c in any of ``runs``): the lowest
    mean in flight any of them reached, in words."""
    lowest: dict[int, float] = {}
    for run in runs:
        if run.levels.empty or "inflight_below_target" not in run.levels:
            continue
        for level in run.levels.to_dict("records"):
            if level.get("inflight_below_target") is True and level.get("inflight_mean") is not None:
                c = int(level["concurrency"])
                lowest[c] = min(lowest.get(c, float("inf")), float(level["inflight_mean"]))
    return {c: f"{mean:.1f} of {c} in flight" for c, mean in lowest.items()}


# --------------------------------------------------------------------------- one run


def _run_caveats(run: RunData, own: bool) -> list[tuple[Kind, str]]:
    """What a single run's own data says against its numbers (``own``: the run rendering this,
    whose status is still 'running' while it does)."""
    notes: list[tuple[Kind, str]] = []
    params = run.manifest.get("params") or {}
    status = run.manifest.get("status")
    if status == "running" and not own:
        notes.append((Kind.RUN_UNFINISHED, "the run has not finished (still running, or stopped without recording "
                      "an end): its figures may be partial."))
    elif status not in ("ok", "running"):
        notes.append((Kind.RUN_FAILED, f"the run ended with status {status!r}: "
                      f"{scrub_paths(run.manifest.get('error') or 'no error recorded')}."))
    if not run.levels.empty:
        if "foreign_traffic" in run.levels and run.levels["foreign_traffic"].fillna(False).astype(bool).any():
            notes.append((Kind.FOREIGN_TRAFFIC, "the server counted more requests/tokens than speclab sent (foreign "
                          "traffic): its counter-based figures include someone else's load."))
        errors = int(run.levels["errors"].sum()) if "errors" in run.levels else 0
        if errors:
            notes.append((Kind.REQUEST_ERRORS, f"{errors} request(s) failed; they are excluded from every figure."))
        for c, reached in sorted(load_shortfalls([run]).items()):
            notes.append((Kind.LOAD_SHORTFALL, f"the level labelled concurrency {c} had only {reached} on average: its "
                          "figures are for a lighter load than its label; raise rounds (or set level_duration_s)."))
        notes += _level_path_caveats(run.levels)
        for level in run.levels.to_dict("records"):
            harness = level.get("harness") if isinstance(level.get("harness"), dict) else {}
            lag = harness.get("p99_s") or harness.get("lag_p99_s")
            tpot = level.get("tpot_s_median")
            if lag and tpot and lag > tpot:
                notes.append((Kind.CLIENT_LAG, f"at concurrency {level.get('concurrency')} the client's event loop "
                              f"lagged {lag * 1e3:.1f} ms (p99), more than the median TPOT: raise workers."))
    temperature = params.get("temperature")
    if temperature not in (None, 0, 0.0):
        notes.append((Kind.SAMPLED, f"temperature {temperature}: outputs are sampled, so arms are not lossless pairs."))
    if params.get("ignore_eos"):
        notes.append((Kind.IGNORE_EOS, "ignore_eos is on: acceptance on forced continuations is not representative."))
    dtype = run.server.get("dtype")
    if dtype and "bfloat16" in str(dtype):
        notes.append((Kind.BF16, "served in bf16: batched verification may change greedy outputs slightly."))
    plan = run.path / PLAN_JSON
    if plan.exists() and read_json(plan).get("reused_prompts"):
        notes.append((Kind.REUSED_PROMPTS, "some prompts were reused across levels: prefix/suffix caches may flatter "
                      "repeats."))
    for problem in run.server.get("contradictions") or []:
        notes.append((Kind.CONTRADICTION, scrub_paths(problem)))
    notes += _cost_model_caveats(run)
    notes += _beyond_sweep(run)
    return notes


def _beyond_sweep(run: RunData) -> list[tuple[Kind, str]]:
    """Traffic the run was told about at concurrencies its sweep did not measure: every figure
    there (payback, the configuration search) is left out, and the reader is told how to add it."""
    params = run.manifest.get("params") or {}
    traffic = params.get("traffic") or []
    if run.levels.empty or "concurrency" not in run.levels or not traffic:
        return []
    swept = sorted({int(c) for c in run.levels["concurrency"].dropna()})
    if not swept:
        return []
    beyond = [t for t in traffic if not swept[0] <= float(t.get("concurrency", 0)) <= swept[-1]]
    if not beyond:
        return []
    where = ", ".join(f"{float(t['concurrency']):g} ({float(t.get('hours_per_day', 0)):g} h a day)" for t in beyond)
    return [(Kind.BEYOND_SWEEP, f"traffic at concurrency {where} lies beyond the sweep ({swept[0]}-{swept[-1]}): no "
                                "payback or configuration figure is judged there; add it to concurrency to judge it.")]


def _level_path_caveats(levels: pd.DataFrame) -> list[tuple[Kind, str]]:
    """Paths a sweep took quietly, made loud: no counters, no prefix-cache reset."""
    notes: list[tuple[Kind, str]] = []
    records = levels.to_dict("records")
    failed = [r for r in records if r.get("metrics_scrape") not in (None, "ok")]
    if failed:
        where = ", ".join(str(r.get("concurrency")) for r in failed)
        notes.append((Kind.METRICS_UNREAD, f"/metrics could not be read at concurrency {where} "
                      f"({scrub_paths(failed[0]['metrics_scrape'])}): those levels have no acceptance, server "
                      "latency or foreign-traffic check."))
    refused = sorted({str(r["prefix_cache_reset"]) for r in records
                      if str(r.get("prefix_cache_reset") or "").startswith(("refused", "failed"))})
    if refused:
        notes.append((Kind.CACHE_RESET_REFUSED, f"the server's prefix-cache reset {' / '.join(refused)} (vLLM serves "
                      "/reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1): prompts cached by earlier levels or "
                      "arms may look faster; the plan keeps prompts distinct across levels where the prompt set allows."))
    return notes


def _cost_model_caveats(run: RunData) -> list[tuple[Kind, str]]:
    """A prediction that took a fallback (no step model, the probe failed, the built-in prompts
    stood in for the calibration) says so."""
    path = run.path / COST_MODEL_JSON
    if not path.exists():
        return []
    record = read_json(path)
    notes = [(Kind.FALLBACK, f"prediction: {scrub_paths(n)}") for n in (record.get("model") or {}).get("fallbacks") or []]
    if record.get("calibration_prompts_builtin"):
        notes.append((Kind.FALLBACK, f"{record.get('calibration_prompts')}: the verify cost was measured on other "
                      "prompts than yours."))
    return notes


# --------------------------------------------------------------------------- an option against its baseline


def baseline_self_divergence(baseline: RunData) -> dict[str, Any] | None:
    """How much the baseline's greedy outputs differ from its own rerun (01 writes it in bf16)."""
    path = baseline.path / SELF_DIVERGENCE_JSON
    return read_json(path) if path.exists() else None


def losslessness(baseline: RunData, option: RunData) -> compare.Losslessness:
    """The option's greedy outputs against the baseline's, judged against the baseline's own rerun."""
    table = compare.losslessness(baseline.requests, option.requests)
    return compare.judge_losslessness(table, option.server.get("dtype"), baseline_self_divergence(baseline))


def losslessness_verdict(baseline: RunData, option: RunData) -> str:
    """:func:`losslessness` in one sentence."""
    return losslessness(baseline, option).sentence


_LOSSLESSNESS_KINDS = {"not_lossless": Kind.NOT_LOSSLESS, "suspect": Kind.DIVERGENCE_SUSPECT,
                       "unchecked": Kind.DIVERGENCE_UNCHECKED, "within_noise": Kind.DIVERGENCE_WITHIN_NOISE}


def _pair_caveats(baseline: RunData, option: RunData, comparison: pd.DataFrame | None) -> list[tuple[Kind, str]]:
    """What the pairing of an option run with its baseline says against the verdicts."""
    notes: list[tuple[Kind, str]] = []
    if not baseline.requests.empty and not option.requests.empty:
        judged = losslessness(baseline, option)
        if judged.kind in _LOSSLESSNESS_KINDS:
            notes.append((_LOSSLESSNESS_KINDS[judged.kind], judged.sentence))
    if comparison is not None and not comparison.empty:
        few = comparison[(comparison["category"] != "all") & (comparison["pairs"] < 3)]
        if not few.empty:
            notes.append((Kind.FEW_PAIRS, f"{len(few)} category cells rest on fewer than 3 prompt pairs: raise "
                          "per_category for tighter intervals."))
    return notes


# --------------------------------------------------------------------------- all of them


def caveats(runs: list[RunData], *, baseline: RunData | None = None,
            comparisons: Mapping[str, pd.DataFrame] | None = None,
            own_run: str | Path | None = None) -> list[Caveat]:
    """Everything detected that should make a reader doubt a number, per run.

    With ``baseline``, every other run is also checked as its paired option (greedy outputs
    identical? enough prompt pairs per cell in ``comparisons[run.label]``?). ``own_run``: the
    run folder of the notebook rendering these caveats, still 'running' while it does, which
    is therefore not flagged as unfinished.
    """
    own = Path(own_run).resolve() if own_run is not None else None
    found: list[Caveat] = []
    for run in runs:
        notes = _run_caveats(run, own is not None and run.path.resolve() == own)
        if baseline is not None and run is not baseline:
            notes += _pair_caveats(baseline, run, (comparisons or {}).get(run.label))
        found += [Caveat(kind, run.label, run_id(run.path), message) for kind, message in notes]
    measured = [r for r in runs if not r.levels.empty]
    levels = {f"{r.label} ({r.path.name})": r.levels for r in measured}
    problems = compare.load_problems(levels)
    if problems:  # about the comparison as a whole: every run compared
        found.append(Caveat(Kind.CONTAMINATED, " and ".join(r.label for r in measured),
                            ", ".join(run_id(r.path) for r in measured), compare.load_contamination(levels) or "",
                            detail="; ".join(problems)))
    return found


def group_caveats(found: list[Caveat], *, with_runs: bool = True) -> list[str]:
    """One line per distinct message, naming every run it applies to (first-seen order);
    ``with_runs=False`` names them by label only (where the run ids are shown nearby)."""
    grouped: dict[str, list[Caveat]] = {}
    for caveat in found:
        grouped.setdefault(caveat.message, []).append(caveat)
    lines = []
    for message, caveats_ in grouped.items():
        runs = ", ".join(f"{c.subject} ({c.run})" if with_runs else c.subject for c in caveats_)
        lines.append(f"{runs}: {message}")
    return lines
