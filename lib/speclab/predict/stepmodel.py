"""The step model of a baseline run, whatever ``verify_cost`` said: its one home.

A prediction prices every engine step with a :class:`~speclab.predict.costmodel.CalibratedStepTime`:
the baseline's own steps (read from its streams) for the part every step pays, plus a verify
cost for the draft tokens a speculative step adds, plus speculative mode's own cost per step.
This module builds that model from a run folder, for each source 01-baseline's ``verify_cost``
names (docs/predictor.md):

* ``probe``: the live probe's points (``probe.jsonl``, ``probe-head.jsonl``) fitted by
  :func:`speclab.predict.probefit.fit_probe`;
* ``calibrate``: a baseline and an n-gram run of other prompts (:func:`calibrate_from_runs`);
* ``baseline_slope``: the baseline's own cost of one more sequence standing in (:func:`slope_verify_cost`);
* ``explicit``: the numbers given, with their stated spread (:func:`stated_draws`).

:func:`model_from_record` turns the record 01 writes once (``cost_model.json``) into the model;
:func:`load_cost_model` reads it back for 02 and 05; :func:`learn_overhead` puts speculative
mode's cost that an earlier speculative run measured in place of the stated range.
Analysis layer: it reads run folders only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from speclab.errors import SpeclabError
from speclab.predict.costmodel import (
    CalibratedStepTime,
    StepCost,
    VerifyCost,
    fit_step_cost,
    fit_step_time,
    level_point_extras,
)
from speclab.predict.timings import calibration_steps, level_timings, spec_level_points
from speclab.runfolder import (
    COST_MODEL_JSON,
    HEAD_JSONL,
    PLAN_JSON,
    PROBE_JSONL,
    HeadPoint,
    RunData,
    read_points,
)
from speclab.runs import read_json, run_id

__all__ = [
    "baseline_step_model",
    "calibrate_from_runs",
    "learn_overhead",
    "load_cost_model",
    "model_from_record",
    "slope_verify_cost",
    "stated_draws",
    "with_baseline_steps",
]


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
        model.fallbacks.append("the runs carry no chunk timing: the verify cost falls back to a fit on level "
                               "means, no step model")
        model.notes += model.fallbacks
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
        note = (f"the refit with {Path(baseline_run_dir).name}'s own engine steps failed (too few usable steps): "
                "the calibration's steps alone price this baseline")
        if note not in cost_model.fallbacks:
            cost_model.fallbacks.append(note)
            cost_model.notes.append(note)
        return cost_model
    return replace(cost_model, verify=cost.speculative, steps=cost, step_data=joined)


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
        model.fallbacks.append("the baseline's streams gave too few engine steps for a step model: steps fall "
                               "back to the level means (no context or prefill terms)")
        model.notes.append(model.fallbacks[-1])
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



def model_from_record(record: Mapping[str, Any], baseline_dir: str | Path) -> CalibratedStepTime:
    """The baseline run's step model from its cost-model record (what 01 writes to
    cost_model.json before adding the model's description).

    Every source names itself (``origin``); all but calibrate carry draws of the verify cost
    for the interval and speculative mode's own cost as a range, which calibrate measures instead."""
    source = record["source"]
    if source == "calibrate":
        model = calibrate_from_runs(record["calibration_baseline_run"], record["calibration_spec_run"])
        model.origin = "calibrate"
        return model
    if source == "probe" and not record.get("probe_failed"):
        from speclab.predict.probefit import fit_probe

        points = read_points(Path(baseline_dir) / PROBE_JSONL)
        heads = read_points(Path(baseline_dir) / HEAD_JSONL, HeadPoint)
        fit = fit_probe(points, record.get("target_config_json"), head_points=heads)
        model = baseline_step_model(baseline_dir, fit.verify, source="probe")
        model.verify_draws = fit.draws
        model.notes += fit.notes
        unread = points.malformed + heads.malformed
        if unread:
            model.fallbacks.append(f"{unread} line(s) of the probe's files could not be read (torn or malformed) "
                                   "and were left out of the fit")
            model.notes.append(model.fallbacks[-1])
    elif source == "explicit":
        verify = VerifyCost(**record["verify"])
        model = baseline_step_model(baseline_dir, verify, source="params")
        model.verify_draws = stated_draws(verify, float(record.get("verify_cost_sd", 0.25)))
    else:  # baseline_slope, or a probe that failed (said in the notes)
        verify, draws, note = slope_verify_cost(baseline_dir)
        model = baseline_step_model(baseline_dir, verify, note=note, source="baseline slope")
        model.verify_draws = draws
        if source == "probe":
            model.fallbacks.append(f"the probe failed ({record['probe_failed']}): the verify cost falls back to "
                                   "the baseline's slope (assumed)")
            model.notes.append(model.fallbacks[-1])
    model.origin = source if not record.get("probe_failed") else "baseline_slope (probe failed)"
    overhead = record.get("spec_mode_overhead_ms")
    if overhead:
        model.spec_mode_overhead_s = (float(overhead[0]) / 1e3, float(overhead[1]) / 1e3)
    elif record.get("mode_cost_for"):
        model.mode_costs, notes = mode_costs_for_run(baseline_dir, record["mode_cost_for"])
        model.notes += notes
    sd = record.get("instance_sd")
    if sd is not None:
        model.instance_sd, model.instance_sd_source = float(sd), str(record.get("instance_sd_source") or "")
    return model


def mode_costs_for_run(baseline_dir: str | Path, options: Mapping[str, int]) -> tuple[
        dict[str, dict[int, list[dict[str, Any]]]], list[str]]:
    """Speculative mode's own cost in labelled parts (:mod:`speclab.predict.modecost`) for each
    option (method -> k) at each concurrency the baseline measured, from what the run folder
    knows before any restart: the server's engine and version, whether it is the embedded CPU
    engine, the host class and dtype (its manifest), the proposers timed on its sequences
    (``proposer.json``) and the baseline's own step at each concurrency. Fractions of a step
    become ms at that concurrency's step. Also the notes saying what the parts could not place."""
    from speclab.predict import modecost
    from speclab.runfolder import PROPOSER_JSON
    from speclab.runs import MANIFEST

    manifest = read_json(Path(baseline_dir) / MANIFEST)
    server = manifest.get("server") or {}
    params = manifest.get("params") or {}
    proposer_path = Path(baseline_dir) / PROPOSER_JSON
    proposer = read_json(proposer_path) if proposer_path.exists() else None
    embedded = params.get("mode") == "embedded" or "cpu" in str(server.get("version") or "").lower()
    steps = level_timings(baseline_dir).groupby("concurrency").apply(
        lambda g: float(g["decode_s"].sum() / g["decode_tokens"].sum()), include_groups=False)
    out: dict[str, dict[int, list[dict[str, Any]]]] = {}
    notes: list[str] = []
    for method, k in options.items():
        for c, step_s in steps.items():
            step_ms = 1e3 * float(step_s)
            if embedded:
                cost = modecost.embedded_parts(method, int(k), float(c), step_ms, proposer=proposer,
                                               host=manifest.get("host"), dtype=server.get("dtype"))
            else:
                cost = modecost.mode_cost_parts(str(server.get("engine") or "unknown"), server.get("version"), method,
                                                concurrency=float(c), residual=True)
                if cost.refusal:
                    notes.append(f"speculative mode's cost for {method}: {cost.refusal} It is taken as 0 to 20 % of a "
                                 "step (assumed).")
                    cost = modecost.ModeCost([modecost.ModeCostPart(
                        "unknown_engine", 0.0, 0.20, "fraction", "assumed", cost.refusal)])
                measured = modecost.embedded_parts(method, int(k), float(c), step_ms, proposer=proposer, host=None,
                                                   dtype=None, measurements=[]).parts[0]
                if measured.label == "measured":  # the proposer timed here beats the table's assumption
                    cost.parts = [measured if p.name == "proposer" else p for p in cost.parts]
            out.setdefault(method, {})[int(c)] = [
                {"name": p.name, "low_ms": round(p.ms(step_ms)[0], 4), "high_ms": round(p.ms(step_ms)[1], 4),
                 "label": p.label, "source": p.source,
                 **({"se_ms": round(p.se, 4)} if p.se is not None and p.unit == "ms" else {})} for p in cost.parts]
            notes += [n for n in cost.unknown if n not in notes]
    return out, notes


def load_cost_model(baseline_dir: str | Path) -> CalibratedStepTime | None:
    """The baseline run's step model rebuilt from its cost_model.json (None if absent)."""
    path = Path(baseline_dir) / COST_MODEL_JSON
    if not path.exists():
        return None
    return model_from_record(read_json(path), baseline_dir)


def learn_overhead(model: CalibratedStepTime, other_run: str | Path, option: RunData) -> str:
    """Give ``model`` speculative mode's own cost as ``other_run`` (a 02 run of another option on
    this server) measured it, per concurrency; one sentence saying what was used. Refused with a
    sentence for a run that is not a finished 02 run, was served in another dtype, or is this run."""
    from speclab.predict.ownsteps import overhead_by_concurrency, own_step_parts, require_spec_run
    from speclab.runfolder import load_run

    path = require_spec_run(other_run)
    other = load_run(path)
    if path.resolve() == Path(option.path).resolve():
        raise SpeclabError("spec_mode_overhead_from names this very run; give an earlier run of another option.")
    mine, theirs = option.server.get("dtype"), other.server.get("dtype")
    if mine and theirs and str(mine) != str(theirs):
        raise SpeclabError(f"spec_mode_overhead_from: {run_id(path)} was served in {theirs} and this run in {mine}; "
                           "speculative mode's cost differs by dtype, give a run of the same dtype.")
    if model.spec_mode_overhead_s is None and not model.mode_costs:
        return (f"speculative mode's cost from {run_id(path)} not used: the {model.origin or 'calibrated'} cost model "
                "measured its own")
    their_baseline = other.manifest.get("baseline_run")
    if not their_baseline or not (Path(their_baseline) / PLAN_JSON).exists():
        raise SpeclabError(f"spec_mode_overhead_from: {run_id(path)} names no baseline run that still exists; "
                           "give a 02 run whose baseline folder is still there.")
    parts = own_step_parts(their_baseline, path)
    model.spec_mode_overhead_by_concurrency = overhead_by_concurrency(parts)
    model.spec_mode_overhead_origin = run_id(path)
    if parts.empty:
        return f"{run_id(path)} had too few clean steps to measure speculative mode's cost; the stated range stays"
    return (f"speculative mode's own cost measured in {run_id(path)} ("
            + ", ".join(f"{r.spec_mode_cost_ms:+.1f} ms at c={int(r.concurrency)}" for r in parts.itertuples())
            + ", +- 2 standard errors) replaces the stated range at those concurrencies")

