"""Tables and caveats read from run folders: the one implementation notebooks and the report share.

Everything here takes :class:`~speclab.runfolder.RunData` (or a run folder) and returns plain
data; nothing starts a server or measures, so 05-report can use it on folders alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from speclab.errors import SpeclabError
from speclab.predict.costmodel import CalibratedStepTime
from speclab.predict.predictions import mode_parts_text
from speclab.predict.stepmodel import learn_overhead, load_cost_model
from speclab.report.caveats import load_shortfalls
from speclab.runfolder import PREDICTIONS_PARQUET, RECOMMENDED_CONFIG_JSON, RunData, ServerIdentity
from speclab.runs import read_json, run_id  # notebooks and the report name runs through tables.run_id
from speclab.urls import scrub_paths

__all__ = [
    "acceptance_table",
    "category_table",
    "identity_table",
    "instance_spread",
    "levels_table",
    "mode_cost_table",
    "mark_load",
    "own_steps_table",
    "payback_table",
    "predicted_speedup_grid",
    "predicted_vs_measured",
    "prediction_summary",
    "read_predictions",
    "read_recommendation",
    "recommendation_sentence",
    "recommended_speedups",
    "runners_up_table",
    "run_id",
    "stack_levels",
    "stack_requests",
    "verify_cost_table",
    "without_local_paths",
]


def without_local_paths(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with local paths in its text columns cut to their last part (for HTML that leaves this machine)."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object:
            out[column] = out[column].map(lambda v: scrub_paths(v) if isinstance(v, str) else v)
    return out


def identity_table(identity: ServerIdentity | dict[str, Any] | None, *, shareable: bool = True) -> pd.DataFrame:
    """The server's identity (a ServerIdentity or the manifest's dict) as a two-column table.

    Local paths (model folders, the launch command's files, the server log) are cut to their
    last part: every notebook's HTML may leave this machine, and the manifest keeps them whole.
    ``shareable=False`` shows them whole (a look on this machine only).
    """
    if identity is None:
        return pd.DataFrame(columns=["field", "value"])
    if isinstance(identity, dict):
        # the manifest's copy of the probe; the model only gives it its summary rows
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


def levels_table(run: RunData) -> pd.DataFrame:
    """One row per level with the summary.json contract keys most readers want."""
    if run.levels.empty:
        return pd.DataFrame()
    cols = ["arm", "concurrency", "rate", "repeat", "requests", "inflight_mean", "errors", "output_tokens",
            "duration_s", "output_tok_s", "ttft_s_median", "ttft_s_p99", "tpot_s_median",
            "tpot_s_p99", "e2e_s_median", "tokens_per_chunk_mean", "acceptance_rate",
            "mean_acceptance_length", "server_tpot_s_mean", "server_ttft_s_mean", "foreign_traffic",
            "latency_window"]
    return mark_load(run.levels[[c for c in cols if c in run.levels]], [run])


def acceptance_table(run: RunData) -> pd.DataFrame:
    """Per level: acceptance rate, mean acceptance length and per-position rates (counter deltas)."""
    if run.levels.empty:
        return pd.DataFrame()
    rows = []
    for level in run.levels.to_dict("records"):
        row = {"concurrency": level.get("concurrency"), "repeat": level.get("repeat"),
               "acceptance_rate": level.get("acceptance_rate"),
               "mean_acceptance_length": level.get("mean_acceptance_length"),
               "tokens_per_chunk_mean": level.get("tokens_per_chunk_mean")}
        for i, rate in enumerate(level.get("per_position_acceptance") or []):
            row[f"position_{i}_rate"] = rate
        rows.append(row)
    return pd.DataFrame(rows)


def stack_levels(runs: list[RunData]) -> pd.DataFrame:
    """Levels of several runs in one long table (``arm`` tells them apart)."""
    frames = [r.levels.assign(arm=r.label, run=r.path.name) for r in runs if not r.levels.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def stack_requests(runs: list[RunData]) -> pd.DataFrame:
    """Requests of several runs in one long table (``arm`` tells them apart)."""
    frames = [r.requests.assign(arm=r.label, run=r.path.name) for r in runs if not r.requests.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


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


def instance_spread(baseline: RunData, option: RunData, instance_sd: float | None) -> float:
    """One server instance's speed spread where the two arms ran on different instances (always
    across a restart; one process id recorded for both means one instance), else 0:
    ``instance_sd`` when given, else the A/A spread measured for the baseline's host class and
    dtype (:func:`speclab.predict.modecost.instance_spread`)."""
    a, b = baseline.server or {}, option.server or {}
    if a.get("pid") is not None and a.get("pid") == b.get("pid"):
        return 0.0
    if instance_sd is not None:
        return instance_sd
    from speclab.predict.modecost import instance_spread as measured

    embedded = (baseline.manifest.get("params") or {}).get("mode") == "embedded"
    return measured(baseline.manifest.get("host"), a.get("dtype"), embedded=embedded)[0]


# --------------------------------------------------------------------------- predictions


def verify_cost_table(model: CalibratedStepTime) -> pd.DataFrame:
    """The step-time model as a two-column table (``field``, ``value``), units in the text:
    what one speculative step is priced at, beside the baseline's own curve."""
    d = model.describe()
    extra = d["extra_ms_at_1_4_16_tokens"]
    steps = ", ".join(f"{b:.1f} seq: {ms:.1f} ms"
                      for b, ms in zip(d["baseline_batches"], d["baseline_step_ms"], strict=True))
    overhead = d.get("spec_mode_overhead_ms")
    if overhead:
        mode = f"{overhead[0]:g}-{overhead[1]:g} ms (the range given; the prediction holds across it or says unclear)"
    elif model.mode_costs:
        mode = ("in labelled parts per option and concurrency (the mode-cost table): measured where this host "
                "could time it, borrowed from the engine's source or a publication, else assumed")
    else:
        mode = "measured by the calibration run (in the fixed cost below)"
    rows = [
        ("verify cost from", f"{model.origin}: {d['source']}" if model.origin else d["source"]),
        ("speculative mode's own cost per step (no probe sees it)", mode),
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
    if model.instance_sd is not None:
        rows.append(("one server instance against another (relative sd, in every interval)",
                     f"{100 * model.instance_sd:.1f} % ({model.instance_sd_source})"))
    rows += [("note", note) for note in model.notes]
    return pd.DataFrame(rows, columns=["field", "value"])


def mode_cost_table(model: CalibratedStepTime) -> pd.DataFrame:
    """Speculative mode's own cost in its labelled parts, per option and concurrency
    (:mod:`speclab.predict.modecost`): each part's range in ms a step, its label and its source,
    and the total the prediction carries. Empty where the model holds no parts (a range was
    given, or calibrate measured the cost)."""
    rows = []
    for method, by_c in model.mode_costs.items():
        for c, parts in sorted(by_c.items()):
            for part in parts:
                rows.append({"option": method, "concurrency": c, "part": str(part["name"]).replace("_", " "),
                             "low_ms": part["low_ms"], "high_ms": part["high_ms"], "label": part["label"],
                             "source": scrub_paths(str(part["source"]))})
            rows.append({"option": method, "concurrency": c, "part": "total",
                         "low_ms": sum(float(p["low_ms"]) for p in parts),
                         "high_ms": sum(float(p["high_ms"]) for p in parts), "label": "", "source": ""})
    return pd.DataFrame(rows)


def prediction_summary(predicted: pd.DataFrame) -> pd.DataFrame:
    """The 'all categories' rows: what each option is predicted to do per concurrency."""
    if predicted.empty:
        return predicted
    cols = ["option", "concurrency", "acceptance_rate", "mean_acceptance_length", "baseline_tok_s",
            "predicted_tok_s", "predicted_speedup", "predicted_speedup_low", "predicted_speedup_high",
            "predicted_interval_width_pct", "predicted_verdict", "break_even_overhead_ms",
            "spec_mode_overhead_ms", "widest_part", "widest_part_break_even_ms",
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
    from speclab.predict.accuracy import compare_predicted_measured

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


def own_steps_table(baseline: RunData, option: RunData) -> pd.DataFrame:
    """After the restart, per concurrency: what the option's own engine steps say a draft token
    and speculative mode itself cost (:mod:`speclab.predict.ownsteps`), beside what the
    baseline's prediction priced them at. ``attrs['reading']``: the table in one sentence, and
    the ``spec_mode_overhead_ms`` range for the next option's prediction on this server."""
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
    method = option.arm
    sd = model.instance_sd if model is not None and model.instance_sd is not None else None
    sd = instance_spread(baseline, option, sd)
    predicted: list[tuple[float, float] | None] = []
    if model is not None:
        parts["predicted_draft_token_ms"] = [model.verify.token_price_s(d, c) * 1e3 for c, d in
                                             zip(parts["concurrency"], parts["draft_tokens_mean"], strict=True)]
        parts["verify_cost_source"] = model.origin or model.verify.source
        for c in parts["concurrency"]:
            rng, _ = model.spec_mode_overhead_for(int(c), method)
            predicted.append(None if rng is None else (rng[0] * 1e3, rng[1] * 1e3))
        parts["predicted_spec_mode_ms"] = [("in the fit (calibrate)" if r is None else f"{r[0]:.1f} to {r[1]:.1f}")
                                           for r in predicted]
        parts["predicted_mode_parts"] = [
            mode_parts_text(model.mode_cost_parts(method, int(c))) if model.mode_costs else "a range given"
            for c in parts["concurrency"]]
    else:
        parts["predicted_spec_mode_ms"] = "none saved"
    # two instances of one server differ by about sqrt(2) x instance_sd of a step (2 sd either way)
    parts["instance_band_ms"] = [2.0 * math.sqrt(2.0) * sd * step for step in parts["baseline_step_ms"]]
    verdicts = []
    for i, r in enumerate(parts.itertuples()):
        misses = []
        price_ok = math.isnan(r.draft_token_ms) or "predicted_draft_token_ms" not in parts \
            or abs(r.draft_token_ms - r.predicted_draft_token_ms) <= max(0.15 * r.predicted_draft_token_ms,
                                                                           2 * r.draft_token_se_ms)
        if not price_ok:
            misses.append("a draft token's price")
        rng = predicted[i] if i < len(predicted) else None
        if rng is not None:
            lo, hi = rng[0] - 2 * r.spec_mode_cost_se_ms, rng[1] + 2 * r.spec_mode_cost_se_ms
            if not lo <= r.spec_mode_cost_ms <= hi:
                band = r.instance_band_ms
                misses.append("the instance spread" if lo - band <= r.spec_mode_cost_ms <= hi + band
                              else "speculative mode's cost")
        verdicts.append(", ".join(misses) if misses else "none: each part within its prediction")
    parts["part_that_missed"] = verdicts
    low, high = overhead_range(parts) or (float("nan"), float("nan"))
    cost = ", ".join(f"{r.spec_mode_cost_ms:+.1f} ms at c={int(r.concurrency)}" for r in parts.itertuples())
    price = ", ".join(f"{r.draft_token_ms:.2f} ms" if r.draft_token_ms == r.draft_token_ms else "no draft"
                      for r in parts.itertuples())
    reading = (f"Speculative mode itself cost {cost} a step beside the baseline's steps (this includes any "
               f"difference between the two server instances, about ±{parts['instance_band_ms'].max():.1f} ms here); "
               f"a verified draft token cost {price}")
    if "predicted_draft_token_ms" in parts:
        reading += (" against the prediction's " + ", ".join(f"{r.predicted_draft_token_ms:.2f}"
                                                             for r in parts.itertuples()) + " ms")
    missed = sorted({m for v in verdicts for m in v.split(", ") if not v.startswith("none")})
    reading += (f". What the prediction got wrong: {', '.join(missed)} (per concurrency in part_that_missed)"
                if missed else ". Every part fell within its prediction (two standard errors)")
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


def payback_table(data: RunData, traffic: Sequence[Mapping[str, float]], restart_minutes: float | None,
                  predicted: pd.DataFrame) -> pd.DataFrame:
    """Hours until a restart into each option pays for itself, for the expected traffic, with
    the restart's cost by the one rule 01 and 05 share (:func:`speclab.predict.payback.restart_cost_s`);
    traffic beyond the sweep is marked, not extrapolated. Where no restart cost is known (an
    external server speclab did not start), one row saying what to give."""
    from speclab.predict.payback import restart_cost_s, restart_payback

    restart_s, source = restart_cost_s(restart_minutes, data.server.get("load_time_s"))
    if restart_s is None:
        return pd.DataFrame({"note": [
            "No restart cost is known: speclab did not start this server, so it could not time a start. "
            "Give restart_minutes (how long a restart takes your server away) to see the payback."]})
    frames = []
    for option, rows in predicted.groupby("option", sort=False):
        table = restart_payback(rows, traffic, load_time_s=restart_s)
        frames.append(table.assign(option=option, restart_from=source))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


# --------------------------------------------------------------------------- the configuration to restart into


def read_recommendation(baseline: RunData) -> dict[str, Any] | None:
    """The baseline run's recommended-config.json (01's configuration search), or None."""
    path = baseline.path / RECOMMENDED_CONFIG_JSON
    return read_json(path) if path.exists() else None


def recommendation_sentence(record: dict[str, Any]) -> str:
    """The configuration search's answer in one paragraph: what to restart into, what it saves a
    day, its payback and exact restart line; or why the baseline stays; and what was not judged."""
    beyond = record.get("beyond_sweep") or []
    unjudged = ""
    if beyond:
        swept = record.get("swept_concurrency") or []
        where = ", ".join(f"{b['concurrency']:g} ({b['hours_per_day']:g} h a day)" for b in beyond)
        unjudged = (f" Traffic at concurrency {where} lies beyond the sweep ({swept[0]}-{swept[-1]}) and was not "
                    "judged: add it to 01's concurrency to judge it." if swept else "")
    option = record.get("option")
    if not option:
        return ("Keep the baseline: no configuration is predicted to save server time without its lower bound losing "
                f"more than {100 * float(record.get('tolerance') or 0.02):g} % at some concurrency of the expected day "
                f"({record.get('candidates', 0)} configurations predicted)." + unjudged)
    low, high = record.get("expected_daily_gain_interval_h") or (None, None)
    payback = record.get("payback_hours")
    text = (f"Restart into {option['label']}: predicted to free {record['expected_daily_gain_server_h']:.2f} server-hours "
            f"a day ({low:.2f} to {high:.2f}) over the expected traffic")
    text += (f", paying a {record['restart_minutes']:g}-minute restart back after {payback:.1f} h" if payback is not None
             else ", restart cost unknown (give restart_minutes)")
    return text + f". Restart with: {' '.join(record.get('restart_args') or [])}." + unjudged


def recommended_speedups(record: dict[str, Any]) -> pd.DataFrame:
    """The recommended configuration's predicted speedup per concurrency with its 90 % interval
    (``judged`` False: beyond the sweep, no figure)."""
    rows = []
    for c, cell in (record.get("predicted_speedup_by_concurrency") or {}).items():
        judged = cell.get("judged", True)
        rows.append({"concurrency": float(c), "k": cell.get("k") if judged else None,
                     "predicted_speedup": cell.get("speedup"), "predicted_speedup_low": cell.get("low"),
                     "predicted_speedup_high": cell.get("high"), "judged": "yes" if judged else "beyond the sweep"})
    return pd.DataFrame(rows)


def runners_up_table(record: dict[str, Any]) -> pd.DataFrame:
    """The next configurations the search ranked, their daily gain and why each lost."""
    return pd.DataFrame([{"configuration": r["label"], "server_h_saved_per_day": r["daily_gain_server_h"],
                          "why_it_lost": r["why_not"], "restart_line": " ".join(r.get("restart_args") or [])}
                         for r in record.get("runners_up") or []])
