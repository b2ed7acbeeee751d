"""Predict a speculative option's effect from a baseline run, and check predictions.

The notebook-facing layer over :mod:`speclab.predict.replay` (what would be accepted) and
:mod:`speclab.predict.costmodel` (what a speculative step costs):

* :func:`predict_from_baseline`: category x concurrency, predicted acceptance, tok/s,
  speedup and break-even, from a baseline run folder alone plus a calibrated cost model;
  every level of the baseline stepped through twice (:func:`simulate_option_levels`).
* :func:`calibrate_from_runs`: the step-time model fitted on the engine steps of a baseline
  and a speculative run of the same plan, read from their streams (:func:`calibration_steps`;
  the runs themselves are made by :mod:`speclab.predict.calibration`); :func:`with_baseline_steps`
  adds the predicted baseline's own steps to the fit.
* :func:`compare_predicted_measured`: predicted vs measured speedup per category x
  concurrency once the option has been run; :func:`compare_replay_with_server`: replayed
  vs server counter deltas per level.
* :func:`restart_payback`: hours until a restart for the option pays for itself.

Speedup is per stream, from decode time: ``TPOT_baseline / TPOT_spec`` with
``TPOT = sum(e2e - ttft) / sum(output_tokens - 1)`` over a group's requests (TTFT is
prefill, which speculation does not change).

This module reads run folders and parameters only; it starts nothing. In a notebook::

    model = calibrate_from_runs(calibration_baseline_dir, calibration_ngram_dir)
    predict_from_baseline(baseline_run_dir, default_option("suffix"), model)
    compare_predicted_measured(baseline_run_dir, ngram_run_dir, cost_model=model)
    restart_payback(prediction, [{"concurrency": 4, "hours_per_day": 8}], baseline_run_dir=...)
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from speclab.errors import SpeclabError
from speclab.options import SpecOption
from speclab.predict.costmodel import (
    CalibratedStepTime,
    StepCost,
    TrafficSlice,
    VerifyCost,
    fit_step_cost,
    fit_step_time,
    level_point_extras,
    payback_hours,
)
from speclab.predict.levelsim import SimRequest, simulate_level
from speclab.predict.replay import ReplayResult, baseline_requests, replay_option
from speclab.predict.steptrace import CLIENT_STALL_TOLERANCE_S, StepPlan, prompt_tokens, run_steps
from speclab.runs import read_json
from speclab.stats import INSTANCE_SD

__all__ = [
    "calibrate_from_runs",
    "calibration_steps",
    "compare_predicted_measured",
    "compare_replay_with_server",
    "level_timings",
    "predict_from_baseline",
    "restart_payback",
    "run_option",
    "simulate_option_levels",
    "spec_level_points",
    "step_plans",
    "with_baseline_steps",
]




# --------------------------------------------------------------------------- run readers


def _requests(run_dir: str | Path) -> pd.DataFrame:
    from speclab.runfolder import read_records

    frame = pd.DataFrame(read_records(run_dir))
    if frame.empty:
        raise SpeclabError(f"{run_dir} holds no requests; choose a finished run folder.")
    frame = frame[frame["ok"].fillna(False).astype(bool)].copy()
    frame["decode_s"] = frame["e2e_s"] - frame["ttft_s"]
    frame["decode_tokens"] = frame["output_tokens"] - 1
    frame["chunk_steps"] = [_decode_chunks(c) for c in frame.get("chunk_tokens", pd.Series([None] * len(frame)))]
    return frame[frame["decode_tokens"] > 0]


def _decode_chunks(chunk_tokens: Any) -> float:
    """Streamed chunks carrying tokens after the first: one per engine step the request took
    (fewer only where the server merged chunks for a slow reader); NaN when not recorded."""
    if chunk_tokens is None or (isinstance(chunk_tokens, float) and math.isnan(chunk_tokens)):
        return math.nan
    return float(sum(1 for n in chunk_tokens if n) - 1)


def _union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    order = np.argsort(starts)
    total, cur_start, cur_end = 0.0, None, None
    for s, e in zip(starts[order], ends[order], strict=True):
        if cur_end is None or s > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = s, e
        else:
            cur_end = max(cur_end, e)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def _effective_batch(group: pd.DataFrame) -> float:
    """Mean number of requests decoding while any is (time-weighted)."""
    starts = (group["send_time_s"] + group["ttft_s"]).to_numpy(float)
    ends = (group["send_time_s"] + group["e2e_s"]).to_numpy(float)
    span = _union_length(starts, ends)
    return float(group["decode_s"].sum() / span) if span > 0 else 1.0


def level_timings(run_dir: str | Path, by_category: bool = False) -> pd.DataFrame:
    """Per level (and category): requests, decode time, TPOT and the effective batch.

    ``tpot_s`` = sum(e2e - ttft) / sum(output_tokens - 1): the decode step time of a
    baseline run, the per-token time of a speculative one. ``batch`` is the level's
    effective batch (requests decoding at once, time-weighted), the same for every
    category of a level.
    """
    frame = _requests(run_dir)
    rows = []
    for (level, concurrency), group in frame.groupby(["level", "concurrency"], sort=True):
        batch = _effective_batch(group)
        parts = group.groupby("category") if by_category else [("all", group)]
        for category, part in parts:
            rows.append({
                "level": int(level), "concurrency": int(concurrency), "category": category,
                "requests": len(part), "output_tokens": int(part["output_tokens"].sum()),
                "decode_tokens": int(part["decode_tokens"].sum()), "decode_s": float(part["decode_s"].sum()),
                "tpot_s": float(part["decode_s"].sum() / part["decode_tokens"].sum()),
                "batch": batch,
                "chunk_steps": float(part["chunk_steps"].sum(min_count=len(part))),
            })
    return pd.DataFrame(rows)


def _summary_levels(run_dir: str | Path) -> dict[int, dict[str, Any]]:
    from speclab.runfolder import iter_levels

    return {int(lv["level"]): lv for lv in iter_levels(run_dir)}


def run_option(run_dir: str | Path) -> SpecOption:
    """The speculative option a run was made with (its manifest's params)."""
    manifest = read_json(Path(run_dir) / "manifest.json")
    params = manifest.get("params") or {}
    option = dict(manifest.get("option") or (params.get("target") or {}).get("option") or params.get("option") or {})
    served = (manifest.get("server") or {}).get("speculative_config")
    if not option and isinstance(served, dict) and served.get("method"):
        # what the server itself said it ran (vLLM's /server_info)
        known = {"method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"}
        option = {key: value for key, value in served.items() if key in known and value is not None}
    if not option:
        raise SpeclabError(f"{run_dir}'s manifest names no option; pass the SpecOption explicitly.")
    if "<redacted>" in option.values():
        # Older manifests redacted 'num_speculative_tokens'; the launch command keeps it.
        server = manifest.get("server") or {}
        argv = server.get("cmdline") or []
        launched = {}
        if "--speculative-config" in argv:
            launched = json.loads(argv[argv.index("--speculative-config") + 1])
        for key, value in list(option.items()):
            if value == "<redacted>":
                option[key] = launched.get(key, server.get("spec_positions") if key == "num_speculative_tokens" else None)
    return SpecOption(**option)


def _load_time_s(run_dir: str | Path) -> float | None:
    server = read_json(Path(run_dir) / "manifest.json").get("server") or {}
    value = server.get("load_time_s")
    return float(value) if value else None


# --------------------------------------------------------------------------- calibration


def spec_level_points(baseline_run_dir: str | Path, spec_run_dir: str | Path) -> pd.DataFrame:
    """Per level of a speculative run: verified tokens per sequence per step and step time.

    From the server's counter deltas for the level: steps = sum(output_tokens - 1) -
    d_accepted (each decode step emits 1 + accepted tokens), verified tokens per sequence
    per step = 1 + d_draft_tokens / steps, step time = decode time / steps. The baseline
    run of the same plan gives the same level's baseline step time (``baseline_level_step_s``);
    ``baseline_step_s`` is that step moved along the baseline's own step-time curve to the
    batch the speculative level decoded at, which is smaller when requests finish unevenly.
    """
    spec = level_timings(spec_run_dir)
    base_timing = level_timings(baseline_run_dir)
    curve = baseline_curve(base_timing)
    base = base_timing.set_index("level")
    counters = _summary_levels(spec_run_dir)
    rows = []
    for row in spec.to_dict("records"):
        level = row["level"]
        server = (counters.get(level) or {}).get("server_counters") or {}
        drafts, draft_tokens, accepted = (server.get(k) for k in ("d_drafts", "d_draft_tokens", "d_accepted_tokens"))
        if draft_tokens is None or accepted is None or level not in base.index:
            continue
        # d_accepted also counts drafts accepted past max_tokens or a stop, which the server
        # drops, so it under-counts steps; a merged chunk under-counts them too: the larger wins
        chunk_steps = 0.0 if math.isnan(row["chunk_steps"]) else row["chunk_steps"]
        steps = max(row["decode_tokens"] - accepted, chunk_steps)
        if steps <= 0:
            continue
        base_batch = float(base.loc[level, "batch"])
        # the same level's baseline step, moved to the batch the speculative run decoded at
        # (it thins out sooner: docs/predictor.md), so the fit sees verification alone
        at_spec_batch = curve(row["batch"]) / curve(base_batch)
        rows.append({
            "level": level, "concurrency": row["concurrency"], "batch": row["batch"],
            "verified_tokens_per_seq": 1.0 + draft_tokens / steps,
            "tokens_per_step": row["decode_tokens"] / steps,
            "steps": steps, "counter_steps": row["decode_tokens"] - accepted, "chunk_steps": row["chunk_steps"],
            "drafts": drafts, "draft_tokens": draft_tokens, "accepted_tokens": accepted,
            "step_s": row["decode_s"] / steps,
            "baseline_step_s": float(base.loc[level, "tpot_s"]) * at_spec_batch,
            "baseline_level_step_s": float(base.loc[level, "tpot_s"]),
            "baseline_batch": base_batch,
        })
    if not rows:
        raise SpeclabError(
            f"{spec_run_dir} has no level with speculative counters; run the calibration with a "
            "speculative option on a server that exposes /metrics."
        )
    return pd.DataFrame(rows)


def step_plans(replay: ReplayResult) -> dict[str, StepPlan]:
    """Request id -> the draft and emitted tokens of each of its replayed decode steps."""
    if replay.steps.empty:
        return {}
    plans = {}
    for request_id, group in replay.steps.groupby("request_id", sort=False):
        plans[str(request_id)] = StepPlan(group["draft_tokens"].astype(int).tolist(),
                                          group["emitted_tokens"].astype(int).tolist())
    return plans


def calibration_steps(baseline_run_dir: str | Path, spec_run_dir: str | Path | None = None,
                      option: SpecOption | None = None) -> pd.DataFrame:
    """Engine steps read from the streams of a baseline run and (optionally) a speculative
    run (:mod:`speclab.predict.steptrace`), with a ``speculative`` column and the run's name.

    The speculative run's draft tokens per step come from replaying its option over its own
    outputs (what the server really speculated on), matched chunk by chunk.
    """
    from speclab.runfolder import read_records

    frames = [run_steps(read_records(baseline_run_dir), stalled_levels=_stalled_levels(baseline_run_dir))
              .assign(speculative=False, run=str(Path(baseline_run_dir).resolve()))]
    if spec_run_dir is not None:
        option = option or run_option(spec_run_dir)
        replay = replay_option(baseline_requests(spec_run_dir), option, _max_len(spec_run_dir))
        frames.append(run_steps(read_records(spec_run_dir), step_plans(replay), _stalled_levels(spec_run_dir))
                      .assign(speculative=True, run=str(Path(spec_run_dir).resolve())))
    return pd.concat(frames, ignore_index=True)


def _stalled_levels(run_dir: str | Path) -> set[int]:
    """Levels during which the client's event loop stalled (their stream timing is lost)."""
    stalled = set()
    for level, summary in _summary_levels(run_dir).items():
        harness = summary.get("harness") or {}
        if (harness.get("max_s") or 0.0) > CLIENT_STALL_TOLERANCE_S:
            stalled.add(level)
    return stalled


def _stream_fit(steps: pd.DataFrame, source: str) -> StepCost | None:
    """The step model fitted on ``steps``, or None when the records carry too few steps
    (runs recorded without chunk timing)."""
    try:
        return fit_step_cost(steps, source=source)
    except SpeclabError:
        return None


def calibrate_from_runs(baseline_run_dir: str | Path, spec_run_dir: str | Path, *,
                        knee_tokens: float | None = 1.0) -> CalibratedStepTime:
    """The step-time model from a baseline run and a speculative run of the same plan.

    Fitted on every engine step of both runs read from their streams
    (:func:`calibration_steps`, :func:`speclab.predict.costmodel.fit_step_cost`): the step model the
    level simulation prices with, whose speculative part is the verify cost. Runs recorded
    without chunk timing fall back to one point per level (:func:`spec_level_points`,
    :func:`speclab.predict.costmodel.fit_step_time`; ``knee_tokens`` applies there only).
    """
    base = level_timings(baseline_run_dir).rename(columns={"tpot_s": "step_s"})
    points = spec_level_points(baseline_run_dir, spec_run_dir)
    source = f"fit: {Path(baseline_run_dir).name} + {Path(spec_run_dir).name}"
    steps = calibration_steps(baseline_run_dir, spec_run_dir)
    cost = _stream_fit(steps, f"{source} ({len(steps)} engine steps)")
    if cost is None:
        model = fit_step_time(base[["batch", "step_s"]], points, source=source, knee_tokens=knee_tokens)
        model.notes.append("the runs carry no chunk timing: the verify cost falls back to a fit on level means, "
                           "no step model")
        return model
    return CalibratedStepTime(base[["batch", "step_s"]], cost.speculative, points=level_point_extras(points, cost.speculative),
                              steps=cost, step_data=steps)


def with_baseline_steps(cost_model: CalibratedStepTime, baseline_run_dir: str | Path) -> CalibratedStepTime:
    """``cost_model`` refitted with the engine steps of the baseline run to be predicted
    added to its calibration's (when it was fitted on the stream and they are not in it yet).

    The baseline's own steps are measured before any restart, at exactly the prompts,
    contexts and batches the prediction replays; the speculative part still comes from the
    calibration's speculative run alone (only it has speculative steps)."""
    steps = cost_model.step_data
    if cost_model.steps is None or steps is None:
        return cost_model
    here = str(Path(baseline_run_dir).resolve())
    if here in set(steps["run"]):
        return cost_model
    joined = pd.concat([steps, calibration_steps(baseline_run_dir)], ignore_index=True)
    cost = _stream_fit(joined, f"{cost_model.steps.source} + {Path(baseline_run_dir).name}'s own steps")
    if cost is None:
        return cost_model
    return CalibratedStepTime(cost_model.baseline, cost.speculative, points=cost_model.points,
                              notes=list(cost_model.notes), steps=cost, step_data=joined,
                              verify_draws=cost_model.verify_draws, spec_mode_overhead_s=cost_model.spec_mode_overhead_s,
                              origin=cost_model.origin,
                              spec_mode_overhead_by_concurrency=cost_model.spec_mode_overhead_by_concurrency,
                              spec_mode_overhead_origin=cost_model.spec_mode_overhead_origin)


def baseline_step_model(baseline_run_dir: str | Path, verify: VerifyCost, *, note: str | None = None,
                        source: str = "given") -> CalibratedStepTime:
    """A step-time model with a given verify cost (``explicit``, ``baseline_slope``): the
    baseline's own steps, read from its stream, price the rest of each step."""
    base = level_timings(baseline_run_dir).rename(columns={"tpot_s": "step_s"})[["batch", "step_s"]]
    model = CalibratedStepTime(base, verify)
    cost = _stream_fit(calibration_steps(baseline_run_dir),
                       f"{source} verify cost; the rest of a step from {Path(baseline_run_dir).name}'s own steps")
    if cost is not None:
        model.steps = cost.model_copy(update={"speculative": verify})
    else:
        model.notes.append("the baseline's streams gave too few engine steps for a step model: steps fall "
                           "back to the level means (no context or prefill terms)")
    if note:
        model.notes.append(note)
    return model


def slope_verify_cost(baseline_run_dir: str | Path, draws: int = 200,
                      seed: int = 0) -> tuple[VerifyCost, list[VerifyCost], str]:
    """``baseline_slope``: the baseline's own cost of one more sequence in a step standing in for
    a verified token (assumed), with draws refitted on resampled levels for the interval."""
    base = level_timings(baseline_run_dir).rename(columns={"tpot_s": "step_s"})[["batch", "step_s"]]
    slope = fit_step_time(base, None, source="baseline slope")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(draws):
        sample = base.iloc[rng.integers(0, len(base), len(base))]
        if sample["batch"].nunique() < 2:
            out.append(slope.verify)
            continue
        out.append(fit_step_time(sample, None, source="baseline slope draw").verify)
    return slope.verify, out, slope.notes[0]


def stated_draws(verify: VerifyCost, relative_sd: float, draws: int = 200, seed: int = 0) -> list[VerifyCost]:
    """``explicit`` figures with their stated uncertainty: log-normal multiples of the per-token cost."""
    rng = np.random.default_rng(seed)
    return [verify.model_copy(update={"per_token_s": verify.per_token_s * f})
            for f in rng.lognormal(0.0, relative_sd, draws)]


# --------------------------------------------------------------------------- predictions


def _pool(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Pool timing rows over repeats: decode time and tokens summed, batch averaged."""
    agg = frame.groupby(keys, as_index=False).agg(
        requests=("requests", "sum"), decode_s=("decode_s", "sum"),
        decode_tokens=("decode_tokens", "sum"), batch=("batch", "mean"))
    agg["tpot_s"] = agg["decode_s"] / agg["decode_tokens"]
    return agg


def baseline_curve(timing: pd.DataFrame) -> Callable[[float], float]:
    """T(B, 1) of a run: its decode step time against effective batch (levels pooled per
    concurrency), linear between measured batches and flat past the ends."""
    pooled = _pool(timing, ["concurrency"]).sort_values("batch")
    xs, ys = pooled["batch"].to_numpy(float), pooled["tpot_s"].to_numpy(float)
    return lambda batch: float(np.interp(batch, xs, ys))


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
    instance_sd: float = INSTANCE_SD,
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
    replay = replay or replay_option(baseline_requests(baseline_run_dir), option, _max_len(baseline_run_dir))
    timing = level_timings(baseline_run_dir)
    base = _pool(timing, ["concurrency"]).set_index("concurrency")
    by_cat, by_all = _replay_frames(replay)
    rng = np.random.default_rng(seed)
    dtype = _served_dtype(baseline_run_dir)
    share = divergence_share if divergence_share is not None else _divergence_share(baseline_run_dir, dtype)
    cost_model = with_baseline_steps(cost_model, baseline_run_dir)
    verify_draws = _verify_cost_draws(cost_model, resamples, rng)
    base_requests = _requests(baseline_run_dir)
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
            interval = _speedup_interval(
                replay.requests, r["category"], int(c), batch, base_step, verify_draws,
                level_mix=batch_mix == "level", confidence=confidence, rng=rng, instance_sd=instance_sd,
                divergence_share=share)
            # Inside the measured mix (and for the whole level) the level is stepped through:
            # the batch the option decodes at, not the baseline's (docs/predictor.md).
            sim = simulated.get((str(r["category"]), int(c))) if (batch_mix == "level" or r["category"] == "all") else None
            spec_batch = batch
            if sim is not None:
                factor = sim["speedup"] / speedup
                speedup, spec_step = sim["speedup"], spec_step / factor
                spec_batch = batch * sim["spec_batch"] / sim["baseline_batch"]
                interval = _scaled_interval(interval, factor)
            overhead, overhead_source = cost_model.spec_mode_overhead_for(int(c))
            ranged = _overhead_range(speedup, spec_step, interval, overhead)
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
                + (f" ({overhead_source})" if overhead is not None and overhead_source != "assumed" else ""),
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
    draws = tokens * (base_step * noise_base) / ((base_step + extra) * noise_spec)
    draws = draws[np.isfinite(draws)]
    if len(draws) < 10:
        return {"predicted_speedup_low": None, "predicted_speedup_high": None, "predicted_verdict": PREDICTED_UNCLEAR}
    tail = (1.0 - confidence) / 2.0
    low, high = (float(q) for q in np.quantile(draws, [tail, 1.0 - tail]))
    verdict = PREDICTED_WIN if low > 1.0 else PREDICTED_LOSS if high < 1.0 else PREDICTED_UNCLEAR
    return {"predicted_speedup_low": low, "predicted_speedup_high": high, "predicted_verdict": verdict}


def _served_dtype(run_dir: str | Path) -> str | None:
    manifest = read_json(Path(run_dir) / "manifest.json")
    return (manifest.get("server") or {}).get("dtype") or (manifest.get("params") or {}).get("dtype")


def _divergence_share(run_dir: str | Path, dtype: str | None) -> float:
    """The share of a baseline's answers that an option's run may write differently: none in
    float32; in bf16 what the baseline's self-check saw; all when nothing says otherwise."""
    if dtype and "float32" in str(dtype):
        return 0.0
    path = Path(run_dir) / "self_divergence.json"
    if path.exists():
        record = read_json(path)
        if record.get("pairs"):
            return float(record["pairs"] - record["identical"]) / float(record["pairs"])
    return 1.0


def _overhead_range(speedup: float, spec_step: float, interval: dict[str, Any],
                    overhead_s: tuple[float, float] | None) -> dict[str, Any]:
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
        verdict = (f"{PREDICTED_UNCLEAR}: wins unless speculative mode costs more than {break_even * 1e3:.1f} ms "
                   f"a step (range {text})")
    else:
        verdict = f"{PREDICTED_UNCLEAR}: the interval includes 1 (speculative mode {text} a step)"
    return {"speedup": speedup * at(mid), "overhead_s": mid,
            "interval": {**ranged, "predicted_verdict": verdict},
            "break_even_overhead_ms": break_even * 1e3, "range_text": text}


def _scaled_interval(interval: dict[str, Any], factor: float) -> dict[str, Any]:
    """An interval moved by the level simulation's correction; the verdict re-read from it."""
    if interval["predicted_speedup_low"] is None:
        return interval
    low, high = interval["predicted_speedup_low"] * factor, interval["predicted_speedup_high"] * factor
    verdict = PREDICTED_WIN if low > 1.0 else PREDICTED_LOSS if high < 1.0 else PREDICTED_UNCLEAR
    return {"predicted_speedup_low": low, "predicted_speedup_high": high, "predicted_verdict": verdict}


def _max_len(run_dir: str | Path) -> int:
    from speclab.predict.replay import _max_model_len

    return _max_model_len(Path(run_dir))


def compare_predicted_measured(
    baseline_run_dir: str | Path,
    spec_run_dir: str | Path,
    cost_model: CalibratedStepTime | None = None,
    option: SpecOption | None = None,
) -> pd.DataFrame:
    """Predicted vs measured speedup per category x concurrency (+ ``all``), with error %.

    Both runs must share a plan. Prediction uses the measured batch mix (``level``), as
    the speculative run had. Without ``cost_model`` the verify cost is fitted on this very
    pair (``cost_model_fit`` says ``in-sample``): a check of the model's form, not a
    prediction. ``measured_acceptance_rate`` (server counters) is given where a group
    covers whole levels (``all`` rows; category rows of single-category levels).
    """
    option = option or run_option(spec_run_dir)
    fit = "out-of-sample"
    if cost_model is None:
        cost_model = calibrate_from_runs(baseline_run_dir, spec_run_dir)
        fit = "in-sample"
    predicted = predict_from_baseline(baseline_run_dir, option, cost_model, batch_mix="level")
    base = level_timings(baseline_run_dir, by_category=True)
    spec = level_timings(spec_run_dir, by_category=True)
    measured = []
    for frame, arm in ((base, "baseline"), (spec, "spec")):
        cat = _pool(frame, ["category", "concurrency"])
        every = _pool(frame, ["concurrency"]).assign(category="all")
        both = pd.concat([cat, every], ignore_index=True)[["category", "concurrency", "tpot_s", "requests"]]
        measured.append(both.rename(columns={"tpot_s": f"{arm}_tpot_s", "requests": f"{arm}_requests"}))
    table = measured[0].merge(measured[1], on=["category", "concurrency"])
    table["measured_speedup"] = table["baseline_tpot_s"] / table["spec_tpot_s"]
    counters = _measured_acceptance(spec_run_dir)
    table = table.merge(counters, on=["category", "concurrency"], how="left")
    keep = ["category", "concurrency", "acceptance_rate", "mean_acceptance_length", "tokens_per_step",
            "verified_tokens_per_seq", "predicted_speedup", "predicted_speedup_low", "predicted_speedup_high",
            "predicted_verdict", "predicted_tok_s", "baseline_tok_s", "spec_mode_overhead_ms", "verify_cost_source",
            "dtype"]
    table = predicted[keep].merge(table, on=["category", "concurrency"], how="inner")
    table = table.rename(columns={"acceptance_rate": "predicted_acceptance_rate",
                                  "mean_acceptance_length": "predicted_mean_acceptance_length"})
    table["error_pct"] = (table["predicted_speedup"] / table["measured_speedup"] - 1.0) * 100.0
    table["within_interval"] = ((table["measured_speedup"] >= table["predicted_speedup_low"])
                                & (table["measured_speedup"] <= table["predicted_speedup_high"]))
    table["cost_model_fit"] = fit
    table["option"] = option.label
    return table.sort_values(["category", "concurrency"]).reset_index(drop=True)


def _measured_acceptance(spec_run_dir: str | Path) -> pd.DataFrame:
    """Server-counter acceptance per (category, concurrency) where levels allow it."""
    levels = _summary_levels(spec_run_dir)
    requests = _requests(spec_run_dir)
    cats_per_level = requests.groupby("level")["category"].unique()
    sums: dict[tuple[str, int], list[float]] = {}
    for level, summary in levels.items():
        server = summary.get("server_counters") or {}
        if server.get("d_draft_tokens") is None or level not in cats_per_level.index:
            continue
        c = int(summary["concurrency"])
        cats = list(cats_per_level[level])
        keys = [("all", c)] + ([(cats[0], c)] if len(cats) == 1 else [])
        for key in keys:
            acc = sums.setdefault(key, [0.0, 0.0, 0.0])
            acc[0] += server["d_accepted_tokens"]
            acc[1] += server["d_draft_tokens"]
            acc[2] += server["d_drafts"]
    rows = [{"category": cat, "concurrency": c,
             "measured_acceptance_rate": a / dt if dt else None,
             "measured_mean_acceptance_length": 1 + a / d if d else None}
            for (cat, c), (a, dt, d) in sums.items()]
    return pd.DataFrame(rows, columns=["category", "concurrency", "measured_acceptance_rate",
                                       "measured_mean_acceptance_length"])


def compare_replay_with_server(
    baseline_run_dir: str | Path,
    spec_run_dir: str | Path,
    option: SpecOption | None = None,
    replay: ReplayResult | None = None,
) -> pd.DataFrame:
    """Replayed vs server counter deltas, one row per level of the speculative run.

    Columns ``replay_*`` and ``server_*`` for drafts, draft tokens, accepted tokens and
    the derived rates, plus ``replay_accepted_max`` (accepted if every draft token past the
    recorded output had been accepted: the server's count lies in
    [replay_accepted, replay_accepted_max] when outputs agree) and ``outputs_identical``
    (share of the level's requests whose token ids equal the baseline's: below 1 the
    runs diverged and the replay predicts another text).
    """
    option = option or run_option(spec_run_dir)
    replay = replay or replay_option(baseline_requests(baseline_run_dir), option, _max_len(baseline_run_dir))
    by_level = replay.by("level", "concurrency").set_index("level")
    base_rows = baseline_requests(baseline_run_dir).set_index("prompt_id")
    spec_rows = baseline_requests(spec_run_dir)
    rows = []
    for level, summary in sorted(_summary_levels(spec_run_dir).items()):
        server = summary.get("server_counters") or {}
        if level not in by_level.index:
            continue
        r = by_level.loc[level]
        mine = spec_rows[spec_rows["level"] == level]
        same = [list(t) == list(base_rows.loc[p, "token_ids"]) for p, t in zip(mine["prompt_id"], mine["token_ids"],
                                                                               strict=True) if p in base_rows.index]
        row = {
            "level": level, "concurrency": int(summary["concurrency"]),
            "categories": ",".join(sorted(mine["category"].unique())),
            "requests": int(r["requests"]),
            "outputs_identical": float(np.mean(same)) if same else None,
            "replay_drafts": int(r["drafts"]), "server_drafts": server.get("d_drafts"),
            "replay_draft_tokens": int(r["draft_tokens"]), "server_draft_tokens": server.get("d_draft_tokens"),
            "replay_accepted": int(r["accepted_tokens"]),
            "replay_accepted_max": int(r["accepted_tokens"] + r["draft_tokens_past_output"]),
            "server_accepted": server.get("d_accepted_tokens"),
            "replay_acceptance_rate": r["acceptance_rate"], "server_acceptance_rate": server.get("acceptance_rate"),
            "replay_mean_acceptance_length": r["mean_acceptance_length"],
            "server_mean_acceptance_length": server.get("mean_acceptance_length"),
            "replay_per_position": [round(float(r[f"acceptance_pos{i + 1}"]), 4) if r["drafts"] else None
                                    for i in range(replay.k)],
            "server_per_position": server.get("per_position_acceptance"),
        }
        for name in ("drafts", "draft_tokens", "accepted"):
            mine_v, theirs = row[f"replay_{name}"], row[f"server_{name}"]
            row[f"{name}_error_pct"] = (mine_v / theirs - 1) * 100 if theirs else None
        rows.append(row)
    out = pd.DataFrame(rows)
    out.attrs.update({"proposer_impl": replay.proposer_impl, "token_source": replay.token_source})
    return out


# --------------------------------------------------------------------------- payback


def restart_payback(
    prediction: pd.DataFrame,
    traffic: Sequence[TrafficSlice | dict[str, float]],
    *,
    load_time_s: float | None = None,
    baseline_run_dir: str | Path | None = None,
    category: str = "all",
    restarts: int = 1,
) -> pd.DataFrame:
    """Hours until restarting into the predicted option pays back (``inf``: never).

    ``prediction``: a :func:`predict_from_baseline` table (its ``category`` rows give
    speedup per concurrency, interpolated between levels); ``load_time_s`` defaults to
    the baseline run's measured ``server.load_time_s``.
    """
    if load_time_s is None and baseline_run_dir is not None:
        load_time_s = _load_time_s(baseline_run_dir)
    if load_time_s is None:
        raise SpeclabError("Give load_time_s or a baseline run whose manifest records server.load_time_s.")
    rows = prediction[prediction["category"] == category]
    if rows.empty:
        raise SpeclabError(f"The prediction has no rows for category {category!r}.")
    table = dict(zip(rows["concurrency"].astype(float), rows["predicted_speedup"].astype(float), strict=True))
    return payback_hours(load_time_s, table, traffic, restarts=restarts)
