"""Tables and caveats read from run folders: the one implementation notebooks and the report share.

Everything here takes :class:`~speclab.runfolder.RunData` (or a run folder) and returns plain
data; nothing starts a server or measures, so 05-report can use it on folders alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from speclab.predict import compare
from speclab.predict.costmodel import CalibratedStepTime
from speclab.runfolder import RunData
from speclab.runs import run_id  # notebooks and the report name runs through tables.run_id

COST_MODEL_JSON = "cost_model.json"
PREDICTIONS_PARQUET = "predictions.parquet"
SELF_DIVERGENCE_JSON = "self_divergence.json"

# An absolute path of two or more parts, also after '=' or ':' (LD_PRELOAD lists), but not a
# URL's path (``http://h:8000/v1/models`` is kept: its slashes follow a word character).
_LOCAL_PATH = re.compile(r"(?<![\w/.~-])/(?:[\w.+@-]+/)+([\w.+@-]+)")


def scrub_paths(text: str) -> str:
    """The text with absolute local paths cut to their last part (``…/smollm2-135m``)."""
    return _LOCAL_PATH.sub(lambda m: f"…/{m.group(1)}", str(text))


def without_local_paths(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with local paths in its text columns cut to their last part (for HTML that leaves this machine)."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object:
            out[column] = out[column].map(lambda v: scrub_paths(v) if isinstance(v, str) else v)
    return out


def identity_table(identity: Any, *, shareable: bool = True) -> pd.DataFrame:
    """The server's identity (a ServerIdentity or the manifest's dict) as a two-column table.

    Local paths (model folders, the launch command's files, the server log) are cut to their
    last part: every notebook's HTML may leave this machine, and the manifest keeps them whole.
    ``shareable=False`` shows them whole (a look on this machine only).
    """
    if identity is None:
        return pd.DataFrame(columns=["field", "value"])
    if isinstance(identity, dict):
        # the manifest's copy of the probe; the model only gives it its summary rows
        from speclab.measure.identity import ServerIdentity

        identity = ServerIdentity.model_validate(identity)
    ident = identity
    rows = ident.summary_rows() + [("notes", "; ".join(ident.notes) or "-")]
    frame = pd.DataFrame(rows, columns=["field", "value"])
    if shareable:
        frame["value"] = frame["value"].map(scrub_paths)
    return frame


def category_table(run: RunData) -> pd.DataFrame:
    """Per category x concurrency: requests, per-request tok/s, median TPOT/TTFT, tokens per chunk."""
    frame = run.requests
    if frame.empty:
        return pd.DataFrame()
    ok = frame[frame["ok"].astype(bool)].copy()
    ok["tok_s_per_request"] = ok["output_tokens"] / ok["e2e_s"]
    grouped = ok.groupby(["category", "concurrency"])
    return mark_load(grouped.agg(
        requests=("prompt_id", "count"),
        output_tokens_mean=("output_tokens", "mean"),
        tok_s_per_request=("tok_s_per_request", "median"),
        tpot_s_median=("tpot_s", "median"),
        ttft_s_median=("ttft_s", "median"),
        tokens_per_chunk_mean=("tokens_per_chunk_mean", "mean"),
    ).reset_index(), [run])


def stack_levels(runs: list[RunData]) -> pd.DataFrame:
    """Levels of several runs in one long table (``arm`` tells them apart)."""
    frames = [r.levels.assign(arm=r.label, run=r.path.name) for r in runs if not r.levels.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def stack_requests(runs: list[RunData]) -> pd.DataFrame:
    """Requests of several runs in one long table (``arm`` tells them apart)."""
    frames = [r.requests.assign(arm=r.label, run=r.path.name) for r in runs if not r.requests.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


# --------------------------------------------------------------------------- the load a level reached


def load_shortfalls(runs: list[RunData]) -> dict[int, str]:
    """Per concurrency whose closed-loop level never had its requests in flight (below
    :data:`speclab.measure.summary.INFLIGHT_SHARE_MIN` of c in any of ``runs``): what it reached."""
    out: dict[int, str] = {}
    for run in runs:
        if run.levels.empty or "inflight_below_target" not in run.levels:
            continue
        for level in run.levels.to_dict("records"):
            if level.get("inflight_below_target") is True and level.get("inflight_mean") is not None:
                c = int(level["concurrency"])
                text = f"{level['inflight_mean']:.1f} of {c} in flight"
                out[c] = text if c not in out else min(out[c], text)
    return out


def mark_load(frame: pd.DataFrame, runs: list[RunData]) -> pd.DataFrame:
    """``frame`` with an ``in_flight`` column where a concurrency's level fell short of its
    load (its figures describe a lighter load than its label); unchanged when none did."""
    shortfalls = load_shortfalls(runs)
    if frame.empty or not shortfalls or "concurrency" not in frame:
        return frame
    marked = frame.copy()
    marked["in_flight"] = marked["concurrency"].map(
        lambda c: shortfalls.get(int(c), "full") if pd.notna(c) else None)
    return marked


# --------------------------------------------------------------------------- caveats


@dataclass(frozen=True)
class Caveat:
    """One thing detected in the data that should temper a number."""

    subject: str  # the run's label (baseline, ngram k=4, ...)
    run: str  # its run id (never a local path)
    message: str

    def __str__(self) -> str:
        return f"{self.subject} ({self.run}): {self.message}"


def _run_caveats(run: RunData) -> list[str]:
    """What a single run's own data says against its numbers."""
    notes: list[str] = []
    params = run.manifest.get("params") or {}
    if run.manifest.get("status") != "ok":
        notes.append(f"the run ended with status {run.manifest.get('status')!r}: "
                     f"{scrub_paths(run.manifest.get('error') or 'no error recorded')}.")
    if not run.levels.empty:
        if "foreign_traffic" in run.levels and run.levels["foreign_traffic"].fillna(False).astype(bool).any():
            notes.append("the server counted more requests/tokens than speclab sent (foreign traffic): "
                         "its counter-based figures include someone else's load.")
        errors = int(run.levels["errors"].sum()) if "errors" in run.levels else 0
        if errors:
            notes.append(f"{errors} request(s) failed; they are excluded from every figure.")
        for c, reached in sorted(load_shortfalls([run]).items()):
            notes.append(f"the level labelled concurrency {c} had only {reached} on average: its figures are "
                         "for a lighter load than its label; raise rounds (or set level_duration_s).")
        notes += _level_path_caveats(run.levels)
        for level in run.levels.to_dict("records"):
            harness = level.get("harness") if isinstance(level.get("harness"), dict) else {}
            lag = harness.get("p99_s") or harness.get("lag_p99_s")
            tpot = level.get("tpot_s_median")
            if lag and tpot and lag > tpot:
                notes.append(f"at concurrency {level.get('concurrency')} the client's event loop lagged "
                             f"{lag * 1e3:.1f} ms (p99), more than the median TPOT: raise workers.")
    temperature = params.get("temperature")
    if temperature not in (None, 0, 0.0):
        notes.append(f"temperature {temperature}: outputs are sampled, so arms are not lossless pairs.")
    if params.get("ignore_eos"):
        notes.append("ignore_eos is on: acceptance on forced continuations is not representative.")
    dtype = run.server.get("dtype")
    if dtype and "bfloat16" in str(dtype):
        notes.append("served in bf16: batched verification may change greedy outputs slightly.")
    plan = run.path / "plan.json"
    if plan.exists() and json.loads(plan.read_text()).get("reused_prompts"):
        notes.append("some prompts were reused across levels: prefix/suffix caches may flatter repeats.")
    for note in run.server.get("notes") or []:
        if "declared" in note:
            notes.append(scrub_paths(note))
    notes += _cost_model_caveats(run)
    return notes


def _level_path_caveats(levels: pd.DataFrame) -> list[str]:
    """Paths a sweep took quietly, made loud: no counters, no prefix-cache reset."""
    notes: list[str] = []
    records = levels.to_dict("records")
    failed = [r for r in records if r.get("metrics_scrape") not in (None, "ok")]
    if failed:
        where = ", ".join(str(r.get("concurrency")) for r in failed)
        notes.append(f"/metrics could not be read at concurrency {where} ({scrub_paths(failed[0]['metrics_scrape'])}): "
                     "those levels have no acceptance, server latency or foreign-traffic check.")
    refused = sorted({str(r["prefix_cache_reset"]) for r in records
                      if str(r.get("prefix_cache_reset") or "").startswith(("refused", "failed"))})
    if refused:
        notes.append(f"the server's prefix-cache reset {' / '.join(refused)} (vLLM serves /reset_prefix_cache only "
                     "with VLLM_SERVER_DEV_MODE=1): prompts cached by earlier levels or arms may look faster; "
                     "the plan keeps prompts distinct across levels where the prompt set allows.")
    return notes


def _cost_model_caveats(run: RunData) -> list[str]:
    """A prediction that took a fallback (no step model, built-in calibration prompts) says so."""
    path = run.path / COST_MODEL_JSON
    if not path.exists():
        return []
    record = json.loads(path.read_text())
    notes = [f"prediction: {scrub_paths(n)}" for n in (record.get("model") or {}).get("notes") or []
             if "fall" in n or "no step model" in n or "too few" in n]
    said = str(record.get("calibration_prompts") or "")
    if "built-in prompt sets" in said:
        notes.append(f"{said}: the verify cost was measured on other prompts than yours.")
    return notes


def instance_spread(baseline: RunData, option: RunData, instance_sd: float) -> float:
    """``instance_sd`` where the two arms ran on different server instances (always across a
    restart; one process id recorded for both means one instance), else 0."""
    a, b = baseline.server or {}, option.server or {}
    return 0.0 if a.get("pid") is not None and a.get("pid") == b.get("pid") else instance_sd


def baseline_self_divergence(baseline: RunData) -> dict[str, Any] | None:
    """How much the baseline's greedy outputs differ from its own rerun (01 writes it in bf16)."""
    path = baseline.path / SELF_DIVERGENCE_JSON
    return json.loads(path.read_text()) if path.exists() else None


def losslessness_verdict(baseline: RunData, option: RunData) -> str:
    """The option's greedy outputs against the baseline's, judged against the baseline's own rerun."""
    table = compare.losslessness(baseline.requests, option.requests)
    return compare.losslessness_verdict(table, option.server.get("dtype"), baseline_self_divergence(baseline))


def _pair_caveats(baseline: RunData, option: RunData, comparison: pd.DataFrame | None) -> list[str]:
    """What the pairing of an option run with its baseline says against the verdicts."""
    notes: list[str] = []
    if not baseline.requests.empty and not option.requests.empty:
        verdict = losslessness_verdict(baseline, option)
        if not verdict.startswith("Lossless"):
            notes.append(verdict)
    if comparison is not None and not comparison.empty:
        few = comparison[(comparison["category"] != "all") & (comparison["pairs"] < 3)]
        if not few.empty:
            notes.append(f"{len(few)} category cells rest on fewer than 3 prompt pairs: raise per_category "
                         "for tighter intervals.")
    return notes


def caveats(runs: list[RunData], *, baseline: RunData | None = None,
            comparisons: Mapping[str, pd.DataFrame] | None = None) -> list[Caveat]:
    """Everything detected that should make a reader doubt a number, per run.

    With ``baseline``, every other run is also checked as its paired option (greedy outputs
    identical? enough prompt pairs per cell in ``comparisons[run.label]``?).
    """
    found: list[Caveat] = []
    for run in runs:
        messages = _run_caveats(run)
        if baseline is not None and run is not baseline:
            messages += _pair_caveats(baseline, run, (comparisons or {}).get(run.label))
        found += [Caveat(run.label, run_id(run.path), m) for m in messages]
    measured = [r for r in runs if not r.levels.empty]
    contamination = compare.load_contamination({f"{r.label} ({r.path.name})": r.levels for r in measured})
    if contamination:  # about the comparison as a whole: every run compared
        found.append(Caveat(" and ".join(r.label for r in measured), ", ".join(run_id(r.path) for r in measured),
                            contamination))
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


# --------------------------------------------------------------------------- predictions


def load_cost_model(baseline_dir: str | Path) -> CalibratedStepTime | None:
    """Rebuild the baseline run's step-time model from cost_model.json (None if absent).

    Every source names itself (``origin``); all but calibrate carry draws of the verify cost
    for the interval and the speculative-mode range, which calibrate measures instead."""
    from speclab.predict.costmodel import VerifyCost
    from speclab.predict.predictions import (
        baseline_step_model,
        calibrate_from_runs,
        slope_verify_cost,
        stated_draws,
    )
    from speclab.runs import read_json

    path = Path(baseline_dir) / COST_MODEL_JSON
    if not path.exists():
        return None
    record = read_json(path)
    source = record["source"]
    if source == "calibrate":
        model = calibrate_from_runs(record["calibration_baseline_run"], record["calibration_spec_run"])
        model.origin = "calibrate"
        return model
    if source == "probe" and not record.get("probe_failed"):
        from speclab.measure.probe import HEAD_JSONL, PROBE_JSONL, HeadPoint, read_points
        from speclab.predict.probefit import fit_probe

        fit = fit_probe(read_points(Path(baseline_dir) / PROBE_JSONL), record.get("target_config_json"),
                        head_points=read_points(Path(baseline_dir) / HEAD_JSONL, HeadPoint))
        model = baseline_step_model(baseline_dir, fit.verify, source="probe")
        model.verify_draws = fit.draws
        model.notes += fit.notes
    elif source == "explicit":
        verify = VerifyCost(**record["verify"])
        model = baseline_step_model(baseline_dir, verify, source="params")
        model.verify_draws = stated_draws(verify, float(record.get("verify_cost_sd", 0.25)))
    else:  # baseline_slope, or a probe that failed (said in the notes)
        verify, draws, note = slope_verify_cost(baseline_dir)
        model = baseline_step_model(baseline_dir, verify, note=note, source="baseline slope")
        model.verify_draws = draws
        if source == "probe":
            model.notes.append(f"the probe failed ({record['probe_failed']}): the verify cost falls back to the "
                               "baseline's slope (assumed)")
    model.origin = source if not record.get("probe_failed") else "baseline_slope (probe failed)"
    overhead = record.get("spec_mode_overhead_ms")
    if overhead:
        model.spec_mode_overhead_s = (float(overhead[0]) / 1e3, float(overhead[1]) / 1e3)
    return model


def verify_cost_table(model: CalibratedStepTime) -> pd.DataFrame:
    """The step-time model as a two-column table (``field``, ``value``), units in the text:
    what one speculative step is priced at, beside the baseline's own curve."""
    d = model.describe()
    extra = d["extra_ms_at_1_4_16_tokens"]
    steps = ", ".join(f"{b:.1f} seq: {ms:.1f} ms"
                      for b, ms in zip(d["baseline_batches"], d["baseline_step_ms"], strict=True))
    overhead = d.get("spec_mode_overhead_ms")
    rows = [
        ("verify cost from", f"{model.origin}: {d['source']}" if model.origin else d["source"]),
        ("speculative mode's own cost per step (no probe sees it)",
         f"{overhead[0]:g}-{overhead[1]:g} ms (a stated range; the prediction holds across it or says unclear)"
         if overhead else "measured by the calibration run (in the fixed cost below)"),
        ("fixed cost per speculative step", f"{d['overhead_ms']:.2f} ms"),
        ("first extra verified token in a step", f"{d['per_verified_token_ms']:.2f} ms"),
        ("exponent (tokens in a step)", f"{d['exponent']:.2f}"),
        ("knee: tokens in a step below which an extra one is nearly free", f"{d['knee_tokens']:g}"),
        ("extra step time at 1 / 4 / 16 extra tokens (one sequence)", " / ".join(f"{v:.1f}" for v in extra) + " ms"),
        ("baseline step time by batch", steps),
    ]
    if d["baseline_per_token_ms"] is not None:
        rows.append(("baseline slope per extra sequence", f"{d['baseline_per_token_ms']:.2f} ms"))
    step = d.get("step_model")
    if step:
        rows += [
            ("engine step time by decoding sequences (no context, no prefill)",
             ", ".join(f"{k} seq: {ms:.1f} ms" for k, ms in step["step_ms_by_decoding_sequences"].items())),
            ("per 1,000 tokens of context in a step", f"{step['per_1k_context_tokens_ms']:.2f} ms"),
            ("a step that carries a prefill", f"+{step['prefill_step_ms']:.1f} ms, "
                                              f"+{step['per_prefill_token_ms']:.3f} ms per prompt token"),
            ("engine steps the model was fitted on", f"{step['steps_fitted']:,}"),
        ]
    rows += [("note", note) for note in model.notes]
    return pd.DataFrame(rows, columns=["field", "value"])


def prediction_summary(predicted: pd.DataFrame) -> pd.DataFrame:
    """The 'all categories' rows: what each option is predicted to do per concurrency."""
    if predicted.empty:
        return predicted
    cols = ["option", "concurrency", "acceptance_rate", "mean_acceptance_length", "baseline_tok_s",
            "predicted_tok_s", "predicted_speedup", "predicted_speedup_low", "predicted_speedup_high",
            "predicted_interval_width_pct", "predicted_verdict", "break_even_overhead_ms",
            "break_even_acceptance_length", "verify_cost_source", "dtype", "loses"]
    return predicted[predicted["category"] == "all"][[c for c in cols if c in predicted]].reset_index(drop=True)


def read_predictions(baseline: RunData) -> pd.DataFrame | None:
    """The baseline run's own predictions (01-baseline saved them), or None when it made none."""
    path = baseline.path / PREDICTIONS_PARQUET
    return pd.read_parquet(path) if path.exists() else None


def predicted_vs_measured(baseline: RunData, option: RunData, overhead_from: str | Path | None = None) -> pd.DataFrame:
    """Predicted (baseline + its cost model) vs measured speedup per category x concurrency.

    ``overhead_from``: an earlier speculative run (02) of another option on the same server and
    dtype; speculative mode's own cost its steps measured (:func:`own_steps_table`) replaces the
    stated range at the concurrencies it measured. None: what the option's run was given
    (its ``spec_mode_overhead_from``), so the report reads as 02 did; a run since moved away is
    then said in the note, not raised."""
    from speclab.errors import SpeclabError
    from speclab.predict.predictions import compare_predicted_measured

    model = load_cost_model(baseline.path)
    notes = []
    given = overhead_from is not None
    overhead_from = overhead_from if given else (option.manifest.get("params") or {}).get("spec_mode_overhead_from")
    if overhead_from and model is not None:
        try:
            notes.append(learn_overhead(model, overhead_from, option))
        except SpeclabError as exc:
            if given:
                raise
            notes.append(f"the assumed range stays: {exc}")
    table = compare_predicted_measured(baseline.path, option.path, cost_model=model)
    if model is None:
        notes.append("no cost model saved with the baseline: fitted on this same pair (in-sample)")
    if notes:
        table.attrs["note"] = "; ".join(notes)
    return table


def learn_overhead(model: CalibratedStepTime, other_run: str | Path, option: RunData) -> str:
    """Give ``model`` speculative mode's own cost as ``other_run`` (a 02 run of another option on
    this server) measured it, per concurrency; one sentence saying what was used. Refused with a
    sentence for a run that is not a finished 02 run, was served in another dtype, or is this run."""
    from speclab.errors import SpeclabError
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
    if model.spec_mode_overhead_s is None:
        return (f"speculative mode's cost from {run_id(path)} not used: the {model.origin or 'calibrated'} cost model "
                "measured its own")
    their_baseline = other.manifest.get("baseline_run")
    if not their_baseline or not (Path(their_baseline) / "plan.json").exists():
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


def own_steps_table(baseline: RunData, option: RunData) -> pd.DataFrame:
    """After the restart, per concurrency: what the option's own engine steps say a draft token
    and speculative mode itself cost (:mod:`speclab.predict.ownsteps`), beside what the
    baseline's prediction priced them at. ``attrs['reading']``: the table in one sentence, and
    the ``spec_mode_overhead_ms`` range for the next option's prediction on this server."""
    from speclab.errors import SpeclabError
    from speclab.predict.ownsteps import MIN_STEPS, overhead_range, own_step_parts

    try:
        parts = own_step_parts(baseline.path, option.path)
    except SpeclabError as exc:
        parts = pd.DataFrame()
        parts.attrs["reading"] = f"This run's steps could not be split: {exc}"
        return parts
    if parts.empty:
        parts.attrs["reading"] = (f"Too few clean engine steps to split (each run needs {MIN_STEPS} steps without a "
                                  "prefill at one concurrency, the option's with and without drafts): raise the plan's "
                                  "per_category or rounds.")
        return parts
    model = load_cost_model(baseline.path)
    assumed = model.spec_mode_overhead_s if model is not None else None
    if model is not None:
        parts["predicted_draft_token_ms"] = [model.verify.token_price_s(d, c) * 1e3 for c, d in
                                             zip(parts["concurrency"], parts["draft_tokens_mean"], strict=True)]
        parts["verify_cost_source"] = model.origin or model.verify.source
    parts["assumed_spec_mode_ms"] = (f"{assumed[0] * 1e3:g} to {assumed[1] * 1e3:g}" if assumed
                                     else "measured (calibrate)" if model is not None else "none saved")
    low, high = overhead_range(parts) or (float("nan"), float("nan"))
    cost = ", ".join(f"{r.spec_mode_cost_ms:+.1f} ms at c={int(r.concurrency)}" for r in parts.itertuples())
    price = ", ".join(f"{r.draft_token_ms:.2f} ms" if r.draft_token_ms == r.draft_token_ms else "no draft"
                      for r in parts.itertuples())
    reading = (f"Speculative mode itself cost {cost} a step beside the baseline's steps (this includes any "
               f"difference between the two server instances); a verified draft token cost {price}")
    if "predicted_draft_token_ms" in parts:
        reading += (" against the prediction's " + ", ".join(f"{r.predicted_draft_token_ms:.2f}"
                                                             for r in parts.itertuples()) + " ms")
    if assumed:
        outside = [int(r.concurrency) for r in parts.itertuples()  # beyond two standard errors of the range
                   if r.spec_mode_cost_ms + 2 * r.spec_mode_cost_se_ms < assumed[0] * 1e3
                   or r.spec_mode_cost_ms - 2 * r.spec_mode_cost_se_ms > assumed[1] * 1e3]
        reading += (f". The prediction assumed {assumed[0] * 1e3:g} to {assumed[1] * 1e3:g} ms"
                    + (f", which missed the measured cost at c={', '.join(map(str, outside))}" if outside else ""))
    reading += (f". To predict another option of this engine on this server and dtype, give spec_mode_overhead_ms: "
                f"[{low:g}, {high:g}] (these costs +- 2 standard errors); another host or engine must measure its own.")
    parts.attrs["reading"] = reading
    return parts


def predicted_speedup_grid(predicted: pd.DataFrame) -> pd.DataFrame:
    """Category rows x one column per option and concurrency: the predicted speedup."""
    if predicted.empty:
        return predicted
    grid = predicted.pivot_table(index="category", columns=["option", "concurrency"], values="predicted_speedup")
    grid.columns = [f"{option} at concurrency {concurrency} speedup" for option, concurrency in grid.columns]
    return grid.reset_index()
