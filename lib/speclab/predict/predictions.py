"""Predict a speculative option's effect from a baseline run, with an interval and a verdict.

:func:`predict_from_baseline` gives, per category x concurrency, the predicted acceptance,
tok/s and speedup, from a baseline run folder alone plus its step model
(:mod:`speclab.predict.stepmodel`): acceptance from replaying the option over the baseline's
greedy outputs (:mod:`speclab.predict.replay`), every level of the baseline stepped through
twice (:func:`simulate_option_levels`, :mod:`speclab.predict.levelsim`), each step priced by
the model. Every prediction carries an interval (the bootstrap here) and a verdict that is
"predicted to win" or "to lose" only where the whole interval is on one side of 1.

Speedup is per stream, from decode time: ``TPOT_baseline / TPOT_spec`` with
``TPOT = sum(e2e - ttft) / sum(output_tokens - 1)`` over a group's requests (TTFT is
prefill, which speculation does not change). Checks against a measured option run live in
:mod:`speclab.predict.accuracy`; payback in :mod:`speclab.predict.payback`.

Analysis layer: reads run folders and parameters only; it starts nothing. In a notebook::

    model = stepmodel.load_cost_model(baseline_run_dir)
    predict_from_baseline(baseline_run_dir, default_option("suffix"), model)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from speclab.options import INSTANCE_SD, SpecOption
from speclab.predict.costmodel import CalibratedStepTime, VerifyCost, fit_step_cost, fit_step_time
from speclab.predict.levelsim import SimRequest, simulate_level
from speclab.predict.replay import ReplayResult, baseline_requests, replay_option
from speclab.predict.stepmodel import with_baseline_steps
from speclab.predict.steptrace import StepPlan, prompt_tokens
from speclab.predict.timings import (
    decode_requests,
    level_timings,
    max_model_len,
    pool,
    served_dtype,
    step_plans,
)
from speclab.runfolder import SELF_DIVERGENCE_JSON
from speclab.runs import read_json

__all__ = [
    "PREDICTED_LOSS",
    "PREDICTED_UNCLEAR",
    "PREDICTED_WIN",
    "mode_parts_text",
    "predict_from_baseline",
    "simulate_option_levels",
]




# --------------------------------------------------------------------------- predictions


def simulate_option_levels(
    base_requests: pd.DataFrame,
    replay: ReplayResult,
    cost_model: CalibratedStepTime,
) -> pd.DataFrame:
    """Every level of a baseline run stepped through twice (:func:`speclab.predict.levelsim.simulate_level`):
    as measured (one token per step) and with the option's replayed drafts, each step priced
    by ``cost_model.step_seconds`` from what it holds (decoding sequences, their context,
    draft tokens, prefills), speculative steps with the speculative part.

    One row per request: ``sim_baseline_decode_s``, ``sim_spec_decode_s``, the tokens each arm
    decodes, and the level's simulated effective batch in each arm. A group's predicted
    speedup is the ratio of its simulated time per decoded token.
    """
    plans = step_plans(replay)

    def priced(speculative: bool) -> Callable[[int, int, int, int], float]:
        return lambda seqs, context, drafts, prefill: cost_model.step_seconds(
            seqs, context, drafts, prefill, speculative=speculative)

    rows = []
    for (level, concurrency), group in base_requests.groupby(["level", "concurrency"], sort=True):
        records = group.sort_values("send_time_s", kind="stable").to_dict("records")
        base_arm, spec_arm = [], []
        for r in records:
            steps = int(r["decode_tokens"])
            plan = plans.get(str(r["request_id"]), StepPlan([0] * steps, [1] * steps))
            base_arm.append(SimRequest(r["request_id"], prompt_tokens(r), [0] * steps))
            spec_arm.append(SimRequest(r["request_id"], prompt_tokens(r), plan.draft_tokens, plan.emitted_tokens))
        base = simulate_level(base_arm, int(concurrency), priced(False), budget_tokens=cost_model.budget_tokens)
        spec = simulate_level(spec_arm, int(concurrency), priced(True), budget_tokens=cost_model.budget_tokens)
        for r, b, sp in zip(records, base_arm, spec_arm, strict=True):
            rows.append({
                "request_id": r["request_id"], "category": r["category"], "level": int(level),
                "concurrency": int(concurrency),
                "sim_baseline_decode_s": base.decode_s[r["request_id"]],
                "sim_spec_decode_s": spec.decode_s[r["request_id"]],
                "baseline_decode_tokens": len(b.draft_tokens),
                "spec_decode_tokens": int(sum(sp.emitted_tokens)) if sp.emitted_tokens is not None else len(sp.draft_tokens),
                "sim_baseline_batch": base.effective_batch, "sim_spec_batch": spec.effective_batch,
            })
    return pd.DataFrame(rows)


def _simulated_speedups(sim: pd.DataFrame) -> dict[tuple[str, int], dict[str, float]]:
    """(category or 'all', concurrency) -> simulated speedup and the two arms' batches."""
    out: dict[tuple[str, int], dict[str, float]] = {}
    if sim.empty:
        return out
    for key, part in [*sim.groupby(["category", "concurrency"]), *((("all", c), p) for c, p in sim.groupby("concurrency"))]:
        levels = part.drop_duplicates("level")
        base_tpot = part["sim_baseline_decode_s"].sum() / part["baseline_decode_tokens"].sum()
        spec_tpot = part["sim_spec_decode_s"].sum() / part["spec_decode_tokens"].sum()
        out[(str(key[0]), int(key[1]))] = {
            "speedup": float(base_tpot / spec_tpot),
            "baseline_batch": float(levels["sim_baseline_batch"].mean()),
            "spec_batch": float(levels["sim_spec_batch"].mean()),
        }
    return out


def _replay_frames(replay: ReplayResult) -> tuple[pd.DataFrame, pd.DataFrame]:
    by_cat = replay.by("category", "concurrency")
    by_all = replay.by("concurrency").assign(category="all")
    return by_cat, by_all


def predict_from_baseline(
    baseline_run_dir: str | Path,
    option: SpecOption,
    cost_model: CalibratedStepTime,
    *,
    batch_mix: Literal["category", "level"] = "level",
    replay: ReplayResult | None = None,
    confidence: float = 0.9,
    resamples: int = 300,
    seed: int = 0,
    instance_sd: float | None = None,
    divergence_share: float | None = None,
) -> pd.DataFrame:
    """Predicted acceptance, tok/s and speedup per category x concurrency (+ ``all``).

    Acceptance comes from replaying ``option`` over the baseline's greedy outputs. Within
    the measured mix (``batch_mix="level"``, the default: what a later run of the same plan
    measures) and for the ``all`` rows, each level of the baseline is stepped through twice
    (:func:`simulate_option_levels`): as measured, and with the replayed drafts, every engine
    step priced by ``cost_model`` from what it holds (decoding sequences, their context,
    draft tokens, a newcomer's prefill), so a batch that thins out sooner and prefills that
    stall every decoding sequence are priced as they happen. ``batch_mix="category"``
    predicts each category served alone (its drafts fill the batch; the steady formula at the
    level's batch).

    Every prediction carries an interval (``predicted_speedup_low``/``_high`` at
    ``confidence``) for what a measurement of the same size would read: a bootstrap over
    the calibration (the verify cost refitted on resampled blocks of its engine steps, or on
    its level points), over the cell's requests (the replayed acceptance) and over the
    baseline's requests twice (the run-to-run noise of each arm's decode time), and, per arm,
    a server instance's own speed (``instance_sd``: the relative spread of one instance's
    step time from another's on the same host). ``predicted_verdict`` is "predicted to win" /
    "to lose" only when the whole interval is on one side of 1, else "unclear"; ``loses``
    keeps the point estimate's sign.

    ``divergence_share``: the share of answers the option may write differently from the
    baseline (None: float32 serves none; else the baseline's own self-check, 01's
    ``self_divergence.json``; unknown: all). Only those answers' replayed acceptance is
    resampled: a measurement of the same prompts that writes the same texts has exactly the
    replayed acceptance, so resampling it would answer another question (other prompts).
    """
    replay = replay or replay_option(baseline_requests(baseline_run_dir), option, max_model_len(baseline_run_dir))
    if instance_sd is None:  # the spread the step model carries (this host class's A/A), else the default
        instance_sd = cost_model.instance_sd if cost_model.instance_sd is not None else INSTANCE_SD
    timing = level_timings(baseline_run_dir)
    base = pool(timing, ["concurrency"]).set_index("concurrency")
    by_cat, by_all = _replay_frames(replay)
    rng = np.random.default_rng(seed)
    dtype = served_dtype(baseline_run_dir)
    share = divergence_share if divergence_share is not None else _divergence_share(baseline_run_dir, dtype)
    cost_model = with_baseline_steps(cost_model, baseline_run_dir)
    verify_draws = _verify_cost_draws(cost_model, resamples, rng)
    base_requests = decode_requests(baseline_run_dir)
    simulated = _simulated_speedups(simulate_option_levels(base_requests, replay, cost_model))
    rows = []
    for frame in (by_cat, by_all):
        for r in frame.to_dict("records"):
            c = r["concurrency"]
            if c not in base.index or not r["decode_steps"]:
                continue
            mix = r if batch_mix == "category" else by_all.set_index("concurrency").loc[c]
            batch, base_step = float(base.loc[c, "batch"]), float(base.loc[c, "tpot_s"])
            spec_step = base_step + cost_model.extra_s(batch, float(mix["verified_tokens_per_step"]))
            tokens = float(r["tokens_per_step"])
            draft_fraction = float(r["draft_fraction"] or 0.0)
            k = replay.k
            speedup = tokens * base_step / spec_step
            overhead, overhead_source = cost_model.spec_mode_overhead_for(int(c), option.method)
            parts = cost_model.mode_cost_parts(option.method, int(c)) if overhead_source == "parts" else []
            mode_sd = cost_model.mode_cost_split(option.method, int(c))[1] if parts else 0.0
            interval = _speedup_interval(
                replay.requests, r["category"], int(c), batch, base_step, verify_draws,
                level_mix=batch_mix == "level", confidence=confidence, rng=rng, instance_sd=instance_sd,
                divergence_share=share, mode_sd_s=mode_sd)
            # Inside the measured mix (and for the whole level) the level is stepped through:
            # the batch the option decodes at, not the baseline's (docs/predictor.md).
            sim = simulated.get((str(r["category"]), int(c))) if (batch_mix == "level" or r["category"] == "all") else None
            spec_batch = batch
            if sim is not None:
                factor = sim["speedup"] / speedup
                speedup, spec_step = sim["speedup"], spec_step / factor
                spec_batch = batch * sim["spec_batch"] / sim["baseline_batch"]
                interval = _scaled_interval(interval, factor)
            if mode_sd > 0 and overhead is not None:
                # measured parts are drawn in the interval (their spread above); the range keeps
                # their mean and the other parts' ends
                overhead = _drawn_parts_at_mean(overhead, parts)
            ranged = _overhead_range(speedup, spec_step, interval, overhead, parts)
            speedup, interval = ranged["speedup"], ranged["interval"]
            spec_step += ranged["overhead_s"]
            spec_for_break_even = base_step + cost_model.extra_s(batch, 1.0 + draft_fraction * k)
            break_even = (1.0 + (spec_for_break_even / base_step - 1.0) / draft_fraction
                          if draft_fraction > 0 else math.nan)
            rows.append({
                "option": option.label, "category": r["category"], "concurrency": int(c), "batch": batch,
                "requests": int(r["requests"]),
                "acceptance_rate": r["acceptance_rate"], "mean_acceptance_length": r["mean_acceptance_length"],
                "draft_fraction": draft_fraction, "tokens_per_step": tokens,
                "verified_tokens_per_seq": float(mix["verified_tokens_per_step"]),
                "baseline_step_ms": base_step * 1e3, "spec_step_ms": spec_step * 1e3,
                "predicted_spec_batch": spec_batch,
                "baseline_tok_s": batch / base_step, "predicted_tok_s": batch * tokens / spec_step,
                "predicted_speedup": speedup,
                **interval,
                "break_even_overhead_ms": ranged["break_even_overhead_ms"],
                "spec_mode_overhead_ms": ranged["range_text"]
                + (f" ({overhead_source})" if overhead is not None and overhead_source not in ("assumed", "parts")
                   else " (in parts)" if overhead_source == "parts" else ""),
                "spec_mode_low_ms": None if overhead is None else overhead[0] * 1e3,
                "spec_mode_high_ms": None if overhead is None else overhead[1] * 1e3,
                "mode_cost_parts": mode_parts_text(parts) if parts else (
                    "measured in the calibration's fit" if overhead is None else f"a range ({overhead_source})"),
                "widest_part": ranged.get("widest_part"),
                "widest_part_break_even_ms": ranged.get("widest_part_break_even_ms"),
                "verify_cost_source": cost_model.origin or cost_model.verify.source,
                "dtype": dtype,
                "predicted_interval_width_pct": (
                    (interval["predicted_speedup_high"] - interval["predicted_speedup_low"]) / speedup * 100
                    if interval["predicted_speedup_low"] is not None and speedup else None),
                "break_even_acceptance_length": break_even,
                "loses": speedup < 1.0,
                **{f"acceptance_pos{i + 1}": r.get(f"acceptance_pos{i + 1}") for i in range(k)},
            })
    out = pd.DataFrame(rows)
    out.attrs.update({"divergence_share": share})
    out.attrs.update({"proposer_impl": replay.proposer_impl, "token_source": replay.token_source,
                      "cost_model": cost_model.verify.source, "batch_mix": batch_mix,
                      "proposer_us_per_seq_step": replay.proposer_us_per_seq_step})
    out["proposer_impl"] = replay.proposer_impl
    return out


# --------------------------------------------------------------------------- intervals

PREDICTED_WIN, PREDICTED_LOSS, PREDICTED_UNCLEAR = "predicted to win", "predicted to lose", "unclear"


# Consecutive engine steps share the host's state of the moment; the bootstrap resamples
# runs of this many steps of one level, not single steps, so that it does not read that
# shared state as independent evidence.
STEP_BLOCK = 50


def _verify_cost_draws(cost_model: CalibratedStepTime, n: int, rng: np.random.Generator) -> list[VerifyCost]:
    """The verify cost refitted on ``n`` bootstrap resamples: of the calibration's engine
    steps, in blocks of :data:`STEP_BLOCK` consecutive steps of a level, where the model was
    fitted on the stream; else of its level points (the exponent kept); the fitted cost
    alone when there are fewer than three points."""
    if cost_model.verify_draws:  # made with the model (probe repeats, baseline levels, stated spread)
        picked = rng.integers(0, len(cost_model.verify_draws), n)
        return [cost_model.verify_draws[i] for i in picked]
    steps = cost_model.step_data
    if cost_model.steps is not None and steps is not None and not steps.empty:
        blocks = steps.groupby([steps["run"], steps["level"], steps["step"] // STEP_BLOCK], sort=False).indices
        members = list(blocks.values())
        draws = []
        for _ in range(n):
            picked = rng.integers(0, len(members), len(members))
            sample = steps.iloc[np.concatenate([members[i] for i in picked])]
            draws.append(fit_step_cost(sample, source="bootstrap",
                                       knee_tokens=cost_model.steps.speculative.knee_tokens).speculative)
        return draws
    points = cost_model.points
    if points is None or len(points) < 3:
        return [cost_model.verify] * n
    columns = ["batch", "verified_tokens_per_seq", "step_s", "baseline_step_s"]
    draws = []
    for _ in range(n):
        sample = points.iloc[rng.integers(0, len(points), len(points))][columns]
        refit = fit_step_time(cost_model.baseline, sample, source="bootstrap", exponent=cost_model.verify.exponent,
                              knee_tokens=cost_model.verify.knee_tokens)
        draws.append(refit.verify)
    return draws


def _ratio_draws(numerator: np.ndarray, denominator: np.ndarray, n: int, rng: np.random.Generator,
                 idx: np.ndarray | None = None) -> np.ndarray:
    """sum(num)/sum(den) over ``n`` bootstrap resamples of the rows (or the given indices)."""
    if len(numerator) == 0:
        return np.full(n, np.nan)
    idx = rng.integers(0, len(numerator), (n, len(numerator))) if idx is None else idx
    den = denominator[idx].sum(axis=1)
    return np.where(den > 0, numerator[idx].sum(axis=1) / np.where(den > 0, den, 1), np.nan)


def _mixed_indices(rows: int, n: int, share: float, rng: np.random.Generator) -> np.ndarray | None:
    """Bootstrap indices where each row is redrawn with probability ``share`` and else kept."""
    if rows == 0:
        return None
    own = np.broadcast_to(np.arange(rows), (n, rows))
    if share <= 0.0:
        return np.array(own)
    drawn = rng.integers(0, rows, (n, rows))
    return drawn if share >= 1.0 else np.where(rng.random((n, rows)) < share, drawn, own)


def _speedup_interval(
    replayed: pd.DataFrame,
    category: str,
    concurrency: int,
    batch: float,
    base_step: float,
    verify_draws: list[VerifyCost],
    *,
    level_mix: bool,
    confidence: float,
    rng: np.random.Generator,
    instance_sd: float = 0.0,
    divergence_share: float = 1.0,
    mode_sd_s: float = 0.0,
) -> dict[str, Any]:
    """The interval and verdict of one cell's predicted speedup (see predict_from_baseline).

    Both arms run the same prompts, so one resample of the cell's requests serves both: the
    prompt mix moves the baseline's decode time and the option's alike and cancels in the
    ratio (resampling each arm on its own counted it twice), and the replayed tokens per step
    and verified tokens per step come from the same requests. Only ``divergence_share`` of the
    requests are resampled in each draw (the answers the option may write otherwise); the rest
    keep their replayed acceptance. What is left between the arms is each server instance's own
    speed (``instance_sd``, one log-normal factor per arm).
    """
    n = len(verify_draws)
    at_c = replayed[replayed["concurrency"] == concurrency]
    cell = at_c if category == "all" else at_c[at_c["category"] == category]
    idx = _mixed_indices(len(cell), n, divergence_share, rng)
    steps = cell["decode_steps"].to_numpy(float)
    tokens = _ratio_draws(cell["decode_tokens"].to_numpy(float), steps, n, rng, idx)
    if level_mix and category != "all":  # the level's mix sets the batch: its own requests
        verified = 1.0 + _ratio_draws(at_c["draft_tokens"].to_numpy(float), at_c["decode_steps"].to_numpy(float),
                                      n, rng, _mixed_indices(len(at_c), n, divergence_share, rng))
    else:
        verified = 1.0 + _ratio_draws(cell["draft_tokens"].to_numpy(float), steps, n, rng, idx)
    noise_base = rng.lognormal(0.0, instance_sd, n)
    noise_spec = rng.lognormal(0.0, instance_sd, n)
    extra = np.array([v.extra_s(batch * max(x - 1.0, 0.0), batch) for v, x in zip(verify_draws, verified, strict=True)])
    if mode_sd_s > 0:  # a measured part of speculative mode's cost: its estimate's own spread, drawn
        extra = extra + rng.normal(0.0, mode_sd_s, n)
    draws = tokens * (base_step * noise_base) / ((base_step + extra) * noise_spec)
    draws = draws[np.isfinite(draws)]
    if len(draws) < 10:
        return {"predicted_speedup_low": None, "predicted_speedup_high": None, "predicted_verdict": PREDICTED_UNCLEAR}
    tail = (1.0 - confidence) / 2.0
    low, high = (float(q) for q in np.quantile(draws, [tail, 1.0 - tail]))
    verdict = PREDICTED_WIN if low > 1.0 else PREDICTED_LOSS if high < 1.0 else PREDICTED_UNCLEAR
    return {"predicted_speedup_low": low, "predicted_speedup_high": high, "predicted_verdict": verdict}


def _divergence_share(run_dir: str | Path, dtype: str | None) -> float:
    """The share of a baseline's answers that an option's run may write differently: none in
    float32; in bf16 what the baseline's self-check saw; all when nothing says otherwise."""
    if dtype and "float32" in str(dtype):
        return 0.0
    path = Path(run_dir) / SELF_DIVERGENCE_JSON
    if path.exists():
        record = read_json(path)
        if record.get("pairs"):
            return float(record["pairs"] - record["identical"]) / float(record["pairs"])
    return 1.0


def mode_parts_text(parts: list[dict[str, Any]]) -> str:
    """Speculative mode's labelled parts in one line (``proposer 0.01-0.02 ms (measured); ...``)."""
    def span(p: dict[str, Any]) -> str:
        lo, hi = float(p["low_ms"]), float(p["high_ms"])
        text = f"{lo:.2f}" if abs(hi - lo) < 0.005 else f"{lo:.2f} to {hi:.2f}"
        return f"{p['name'].replace('_', ' ')} {text} ms ({p['label']})"

    return "; ".join(span(p) for p in parts)


def _drawn_parts_at_mean(overhead: tuple[float, float], parts: list[dict[str, Any]]) -> tuple[float, float]:
    """The range of speculative mode's cost with its measured parts (``se_ms``) at their mean:
    their spread is already in the interval's draws."""
    low, high = overhead
    for p in parts:
        if p.get("se_ms") is not None:
            mid = (float(p["low_ms"]) + float(p["high_ms"])) / 2.0 / 1e3
            low += mid - float(p["low_ms"]) / 1e3
            high -= float(p["high_ms"]) / 1e3 - mid
    return low, high


def _widest(parts: list[dict[str, Any]], break_even_ms: float) -> dict[str, Any]:
    """The part with the widest range, and the cost it may reach before the option stops winning,
    the other parts at the middle of their ranges."""
    if not parts:
        return {}
    widest = max(parts, key=lambda p: float(p["high_ms"]) - float(p["low_ms"]))
    others = sum((float(p["low_ms"]) + float(p["high_ms"])) / 2.0 for p in parts if p is not widest)
    return {"widest_part": str(widest["name"]), "widest_part_break_even_ms": break_even_ms - others}


def _overhead_range(speedup: float, spec_step: float, interval: dict[str, Any],
                    overhead_s: tuple[float, float] | None,
                    parts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The prediction with the engine's own cost of speculative mode, which no probe sees, as a
    range of seconds per speculative step: the point at its middle, the interval from the
    dearest end's low to the cheapest end's high, "predicted to win" only where even the
    dearest end wins (and "to lose" only where even the cheapest loses), else "unclear",
    naming the overhead that decides it. ``speedup``, ``spec_step``: with no such overhead.
    ``overhead_s`` None: measured already (calibrate), so only the break-even is added."""
    break_even = max(spec_step * (speedup - 1.0), 0.0)
    if overhead_s is None:
        return {"speedup": speedup, "interval": interval, "overhead_s": 0.0,
                "break_even_overhead_ms": break_even * 1e3, "range_text": "measured (calibrate)"}
    low_o, high_o = overhead_s
    mid = (low_o + high_o) / 2.0
    at = lambda o: spec_step / (spec_step + o)  # noqa: E731 - the speedup's factor at overhead o
    ranged = {"predicted_speedup_low": None, "predicted_speedup_high": None}
    lo, hi = interval.get("predicted_speedup_low"), interval.get("predicted_speedup_high")
    if lo is not None and hi is not None:
        ranged = {"predicted_speedup_low": lo * at(high_o), "predicted_speedup_high": hi * at(low_o)}
    text = f"{round(low_o * 1e3, 1):g}-{round(high_o * 1e3, 1):g} ms"  # measured ranges carry noise digits
    if ranged["predicted_speedup_low"] is None:
        verdict = PREDICTED_UNCLEAR
    elif ranged["predicted_speedup_low"] > 1.0:
        verdict = PREDICTED_WIN
    elif ranged["predicted_speedup_high"] < 1.0:
        verdict = PREDICTED_LOSS
    elif low_o <= break_even <= high_o:
        widest = _widest(parts or [], break_even * 1e3)
        if widest and len(parts or []) > 1:
            verdict = (f"{PREDICTED_UNCLEAR}: wins unless its {widest['widest_part'].replace('_', ' ')} costs more "
                       f"than {widest['widest_part_break_even_ms']:.1f} ms a step (speculative mode {text} in all)")
        else:
            verdict = (f"{PREDICTED_UNCLEAR}: wins unless speculative mode costs more than {break_even * 1e3:.1f} ms "
                       f"a step (range {text})")
    else:
        verdict = f"{PREDICTED_UNCLEAR}: the interval includes 1 (speculative mode {text} a step)"
    return {"speedup": speedup * at(mid), "overhead_s": mid,
            "interval": {**ranged, "predicted_verdict": verdict},
            "break_even_overhead_ms": break_even * 1e3, "range_text": text, **_widest(parts or [], break_even * 1e3)}


def _scaled_interval(interval: dict[str, Any], factor: float) -> dict[str, Any]:
    """An interval moved by the level simulation's correction; the verdict re-read from it."""
    if interval["predicted_speedup_low"] is None:
        return interval
    low, high = interval["predicted_speedup_low"] * factor, interval["predicted_speedup_high"] * factor
    verdict = PREDICTED_WIN if low > 1.0 else PREDICTED_LOSS if high < 1.0 else PREDICTED_UNCLEAR
    return {"predicted_speedup_low": low, "predicted_speedup_high": high, "predicted_verdict": verdict}
