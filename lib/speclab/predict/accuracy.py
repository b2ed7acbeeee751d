"""Predictions checked against what was measured once the option has been run.

* :func:`compare_predicted_measured`: predicted vs measured speedup per category x
  concurrency, with the error and whether the interval covered the measurement;
* :func:`compare_replay_with_server`: replayed vs server counter deltas per level (drafts,
  draft tokens, accepted tokens), and whether the option wrote the baseline's outputs.

Analysis layer: reads run folders only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from speclab.options import SpecOption
from speclab.predict.costmodel import CalibratedStepTime
from speclab.predict.predictions import predict_from_baseline
from speclab.predict.replay import ReplayResult, baseline_requests, replay_option
from speclab.predict.stepmodel import calibrate_from_runs
from speclab.predict.timings import (
    decode_requests,
    level_timings,
    max_model_len,
    pool,
    run_option,
    summary_levels,
)

__all__ = ["AGREE", "CONFIDENTLY_WRONG", "UNCLEAR", "compare_predicted_measured", "compare_replay_with_server",
           "measured_decode_interval", "schedule_check", "verdict_agreement"]


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
        cat = pool(frame, ["category", "concurrency"])
        every = pool(frame, ["concurrency"]).assign(category="all")
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
    levels = summary_levels(spec_run_dir)
    requests = decode_requests(spec_run_dir)
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
    replay = replay or replay_option(baseline_requests(baseline_run_dir), option, max_model_len(baseline_run_dir))
    by_level = replay.by("level", "concurrency").set_index("level")
    base_rows = baseline_requests(baseline_run_dir).set_index("prompt_id")
    spec_rows = baseline_requests(spec_run_dir)
    rows = []
    for level, summary in sorted(summary_levels(spec_run_dir).items()):
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



def measured_decode_interval(baseline_run_dir: str | Path, spec_run_dir: str | Path, *, confidence: float = 0.9,
                             resamples: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Per category x concurrency (+ ``all``): the measured decode speedup
    (``TPOT_baseline / TPOT_spec``, as :func:`compare_predicted_measured` measures it) with a
    paired bootstrap interval over the prompts both arms ran (the measurement's own noise,
    not the instance's)."""
    keys = ["concurrency", "repeat", "prompt_id"]
    base = decode_requests(baseline_run_dir)[[*keys, "category", "decode_s", "decode_tokens"]]
    spec = decode_requests(spec_run_dir)[[*keys, "decode_s", "decode_tokens"]]
    pairs = base.merge(spec, on=keys, suffixes=("_base", "_spec"))
    rng = np.random.default_rng(seed)
    tail = (1.0 - confidence) / 2.0
    rows = []
    groups = [*pairs.groupby(["category", "concurrency"]), *((("all", c), g) for c, g in pairs.groupby("concurrency"))]
    for (category, concurrency), cell in groups:
        arrays = [cell[c].to_numpy(float) for c in ("decode_s_base", "decode_tokens_base", "decode_s_spec",
                                                      "decode_tokens_spec")]
        point = (arrays[0].sum() / arrays[1].sum()) / (arrays[2].sum() / arrays[3].sum())
        idx = rng.integers(0, len(cell), (resamples, len(cell)))
        draws = (arrays[0][idx].sum(1) / arrays[1][idx].sum(1)) / (arrays[2][idx].sum(1) / arrays[3][idx].sum(1))
        low, high = np.quantile(draws, [tail, 1.0 - tail]) if len(cell) > 1 else (point, point)
        rows.append({"category": str(category), "concurrency": int(concurrency), "pairs": len(cell),
                     "measured_decode_speedup": float(point), "measured_low": float(low), "measured_high": float(high)})
    return pd.DataFrame(rows)


AGREE, UNCLEAR, CONFIDENTLY_WRONG = "agree", "unclear", "confidently wrong"


def verdict_agreement(predicted_low: float | None, predicted_high: float | None, measured_low: float,
                      measured_high: float) -> str:
    """How a prediction's verdict fared: ``confidently wrong`` where its interval excludes 1 on
    one side and the measurement's excludes it on the other; ``unclear`` where the prediction's
    interval includes 1; else ``agree``."""
    if predicted_low is None or predicted_high is None or (predicted_low <= 1.0 <= predicted_high):
        return UNCLEAR
    wins = predicted_low > 1.0
    if (wins and measured_high < 1.0) or (not wins and measured_low > 1.0):
        return CONFIDENTLY_WRONG
    return AGREE


def schedule_check(spec_run_dir: str | Path, schedule: list[list[int]] | list[tuple[int, int, int]]) -> pd.DataFrame:
    """Does the server run a per-batch-size schedule (``num_speculative_tokens_per_batch_size``)?

    vLLM picks k from the number of requests it schedules in a step (decoding plus prefilling).
    The run's engine steps are read back from its streams (:func:`speclab.predict.steptrace.run_steps`):
    a step in which some sequence received more than one token verified accepted drafts. Per
    range of the schedule: the steps seen, those with accepted drafts, and tokens per decoding
    sequence. ``attrs['verdict']``: one sentence; ``attrs['ok']``: no step at a k = 0 batch size
    accepted a draft (a draft the server rejected leaves no trace in the stream, so the counters'
    deltas per level are shown beside it by the notebook)."""
    from speclab.predict.steptrace import run_steps
    from speclab.runfolder import read_records

    steps = run_steps(read_records(spec_run_dir))
    steps = steps[steps["matched"].astype(bool) & (steps["decode_seqs"] > 0)].copy()
    steps["batch"] = steps["decode_seqs"] + steps["prefills"]
    ranges = sorted((int(a), int(b), int(k)) for a, b, k in schedule)

    def k_of(batch: int) -> int:
        for a, b, k in ranges:
            if a <= batch <= b:
                return k
        return ranges[-1][2] if batch > ranges[-1][1] else ranges[0][2]

    steps["k"] = steps["batch"].map(k_of)
    steps["accepted"] = steps["emitted_tokens"] > steps["decode_seqs"]
    rows = []
    for (a, b, k) in ranges:
        part = steps[(steps["batch"] >= a) & (steps["batch"] <= b)]
        rows.append({"batch_sizes": f"{a}-{b}", "k": k, "steps": len(part), "steps_with_accepted_drafts":
                     int(part["accepted"].sum()), "tokens_per_sequence": float(part["emitted_tokens"].sum()
                                                                               / part["decode_seqs"].sum())
                     if len(part) else None})
    table = pd.DataFrame(rows)
    off = table[table["k"] == 0]
    leaked = int(off["steps_with_accepted_drafts"].sum())
    seen = int(off["steps"].sum())
    table.attrs["ok"] = leaked == 0
    if off.empty:
        table.attrs["verdict"] = "The schedule turns speculation off at no batch size; nothing to check."
    elif seen == 0:
        table.attrs["ok"] = False
        table.attrs["verdict"] = ("No engine step of this run fell in the schedule's k = 0 batch sizes: raise the "
                                  "concurrency above the first off range to check it.")
    elif leaked:
        table.attrs["verdict"] = (f"NOT as scheduled: {leaked} of {seen} steps at k = 0 batch sizes accepted drafts; "
                                  "the server does not run this schedule.")
    else:
        on = table[table["k"] > 0]
        on_steps, on_accepted = int(on["steps"].sum()), int(on["steps_with_accepted_drafts"].sum())
        if on_steps == 0:
            contrast = "no step of this run fell in the k > 0 batch sizes"
        else:
            contrast = f"at the k > 0 sizes {on_accepted} of {on_steps} steps did"
        table.attrs["verdict"] = (f"As scheduled: none of the {seen} steps at k = 0 batch sizes accepted a draft "
                                  f"(one token a sequence each); {contrast}.")
    return table
