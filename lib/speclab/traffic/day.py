"""Your day, predicted: acceptance from your own traffic, the concurrency it runs at through
the day, and what each speculative option would save.

Inputs are plain data: the per-request replay rows (:func:`speclab.traffic.replay.replay_log`)
and a step-time model (:class:`speclab.predict.costmodel.CalibratedStepTime`, calibrated by
01-baseline or given). Nothing here talks to a server.

* **Acceptance** per option and per category / tenant / output-length bucket: vLLM's
  counters summed over the group's requests, ratios recomputed from the sums (acceptance
  rate = accepted / draft tokens, mean acceptance length = 1 + accepted / drafts), as
  :mod:`speclab.predict.replay` does for a baseline run.
* **Concurrency over time**: every request occupies the server from its ``timestamp_s`` for
  ``duration_s`` (from the log; else estimated from its output length at the model's
  single-sequence step time, and said so). The mean number in flight per time bin is the
  summed overlap / bin length.
* **Speedup per bin**: the requests that arrived in the bin give tokens per step and
  verified tokens per step (their traffic mix, not the day's average); the step-time model
  at the bin's concurrency turns them into baseline and speculative tok/s
  (:func:`speclab.predict.costmodel.predict_speedup`).
* **Hours saved and payback**: each bin is a slice of the day (the log's span scaled to
  24 h) at its own speedup, busy for ``min(concurrency, 1)`` of its length;
  :func:`speclab.predict.costmodel.payback_hours`' rule gives the server-hours freed per day and
  the hours of operation until a restart pays back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from speclab.errors import SpeclabError
from speclab.predict.costmodel import (
    CalibratedStepTime,
    StepTimeModel,
    VerifyCost,
    predict_speedup,
)
from speclab.predict.ngram_fast import COUNTER_COLUMNS

__all__ = ["TrafficDay", "acceptance_by", "concurrency_profile", "given_cost_model", "length_bucket",
           "predict_day", "traffic_vs_benchmark"]

LENGTH_EDGES = (0, 64, 128, 256, 512, 1024, 2048, 4096)


def length_bucket(tokens: pd.Series) -> pd.Series:
    """Output-length bucket labels (``64-127`` tokens ...; the last is open: ``4096+``)."""
    edges = list(LENGTH_EDGES) + [np.inf]
    labels = [f"{a}-{b - 1}" for a, b in zip(LENGTH_EDGES[:-1], LENGTH_EDGES[1:], strict=True)] + [f"{LENGTH_EDGES[-1]}+"]
    return pd.cut(tokens, edges, right=False, labels=labels)  # ordered categorical: sorts by length


def _pos_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c.startswith("accepted_pos")]


def acceptance_by(requests: pd.DataFrame, keys: Sequence[str] = ()) -> pd.DataFrame:
    """Counters summed per option (and ``keys``: category, tenant, output_length_bucket ...),
    with vLLM's ratios recomputed from the sums."""
    frame = requests
    if "output_length_bucket" in keys and "output_length_bucket" not in frame:
        frame = frame.assign(output_length_bucket=length_bucket(frame["output_tokens"]))
    group = ["option", "method", "k", *keys]
    counts = list(COUNTER_COLUMNS) + _pos_columns(frame) + ["output_tokens"]
    grouped = frame.groupby(group, sort=True, dropna=False, observed=True)
    out = grouped[counts].sum().reset_index()
    out.insert(len(group), "requests", grouped.size().values)
    d, dt, steps = (out[c].where(out[c] > 0) for c in ("drafts", "draft_tokens", "decode_steps"))
    out["acceptance_rate"] = out["accepted_tokens"] / dt
    out["mean_acceptance_length"] = 1 + out["accepted_tokens"] / d
    out["draft_fraction"] = out["drafts"] / steps
    out["tokens_per_step"] = out["decode_tokens"] / steps
    out["verified_tokens_per_step"] = (out["decode_steps"] + out["draft_tokens"]) / steps
    for col in _pos_columns(frame):
        out[col.replace("accepted_pos", "acceptance_pos")] = out[col] / d
    return out


def _requests_once(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per request (the replay has one per request x option)."""
    first = requests["option"].iloc[0]
    return requests[requests["option"] == first]


def concurrency_profile(requests: pd.DataFrame, bin_s: float = 900.0,
                        default_step_s: float | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Mean requests in flight per time bin, rebuilt from arrival times and durations.

    Rows: ``bin``, ``start_s`` (epoch), ``hour_utc``, ``requests`` (arrivals), ``output_tokens``
    (of those arrivals), ``concurrency``. Requests without a duration get ``output_tokens *
    default_step_s`` (noted); without timestamps there is no profile (SpeclabError).
    """
    once = _requests_once(requests)
    notes: list[str] = []
    if once["timestamp_s"].isna().all():
        raise SpeclabError("The log has no timestamps, so no concurrency profile; add a timestamp column "
                           "or give the traffic profile by hand.")
    missing_t = int(once["timestamp_s"].isna().sum())
    if missing_t:
        notes.append(f"{missing_t} requests without a timestamp are left out of the concurrency profile")
        once = once[once["timestamp_s"].notna()]
    duration = once["duration_s"].astype(float)
    missing_d = int(duration.isna().sum())
    if missing_d:
        if default_step_s is None:
            raise SpeclabError("Some requests have no duration_s; give a step-time model to estimate them.")
        duration = duration.fillna(once["output_tokens"] * default_step_s)
        notes.append(f"{missing_d} request durations estimated as output tokens x {default_step_s * 1e3:.1f} ms "
                     "(the model's single-sequence step)")
    start = once["timestamp_s"].to_numpy(float)
    end = start + duration.to_numpy(float)
    t0 = math.floor(start.min() / bin_s) * bin_s
    n_bins = max(int(math.ceil((end.max() - t0) / bin_s)), 1)
    busy = np.zeros(n_bins + 1)
    full = np.zeros(n_bins + 2)  # difference array: whole bins a request covers
    first = ((start - t0) // bin_s).astype(int)
    last = np.minimum(((end - t0) // bin_s).astype(int), n_bins)
    same = first == last
    np.add.at(busy, first[same], (end - start)[same])
    cross = ~same
    np.add.at(busy, first[cross], (t0 + (first[cross] + 1) * bin_s) - start[cross])
    np.add.at(busy, last[cross], end[cross] - (t0 + last[cross] * bin_s))
    np.add.at(full, first[cross] + 1, 1)
    np.add.at(full, last[cross], -1)
    busy += np.cumsum(full)[: n_bins + 1] * bin_s
    arrivals = np.bincount(first, minlength=n_bins + 1)
    tokens = np.bincount(first, weights=once["output_tokens"].to_numpy(float), minlength=n_bins + 1)
    starts = t0 + np.arange(n_bins + 1) * bin_s
    profile = pd.DataFrame({"bin": np.arange(n_bins + 1), "start_s": starts,
                            "hour_utc": (starts % 86400) / 3600.0, "requests": arrivals,
                            "output_tokens": tokens.astype(np.int64), "concurrency": busy / bin_s})
    profile = profile[(profile["concurrency"] > 0) | (profile["requests"] > 0)].reset_index(drop=True)
    return profile, notes


@dataclass
class TrafficDay:
    """The predicted day: per time bin x option, and per option (tok/s, hours saved, payback)."""

    per_bin: pd.DataFrame
    per_option: pd.DataFrame
    profile: pd.DataFrame
    span_hours: float
    notes: list[str] = field(default_factory=list)


def predict_day(requests: pd.DataFrame, model: StepTimeModel, *, load_time_s: float, bin_s: float = 900.0,
                restarts: int = 1) -> TrafficDay:
    """Predicted tok/s per time bin and option, hours saved per day, restart payback.

    ``model``: T(B, n) step times (calibrated or given); ``load_time_s``: one restart's
    downtime. A bin's batch is its mean concurrency (at least 1: a server decoding anything
    decodes at least one sequence).
    """
    if requests.empty:
        raise SpeclabError("The replay holds no requests; check the log's bad rows.")
    profile, notes = concurrency_profile(requests, bin_s, default_step_s=model.step_time_s(1.0, 1.0))
    span_h = (int(profile["bin"].max()) + 1) * bin_s / 3600.0  # idle bins (dropped) count too
    t0 = profile["start_s"].min()
    frame = requests[requests["timestamp_s"].notna()].copy()
    # arrival bin numbers on the profile's grid (its bins start at t0)
    frame["bin"] = ((frame["timestamp_s"] - t0) // bin_s).astype(int)
    per_bin_acc = acceptance_by(frame, ["bin"]).set_index(["option", "bin"])
    overall = acceptance_by(requests).set_index("option")
    rows = []
    for option in overall.index:
        whole = overall.loc[option]
        for b in profile.to_dict("records"):
            key = (option, b["bin"])
            acc = per_bin_acc.loc[key] if key in per_bin_acc.index else whole
            if not acc["decode_steps"]:
                acc = whole
            batch = max(float(b["concurrency"]), 1.0)
            pred = predict_speedup(model, batch, float(acc["tokens_per_step"]), float(acc["verified_tokens_per_step"]))
            rows.append({"option": option, "method": whole["method"], "k": int(whole["k"]), "bin": b["bin"],
                         "start_s": b["start_s"], "hour_utc": b["hour_utc"], "concurrency": b["concurrency"],
                         "batch": batch, "requests": b["requests"], "output_tokens": b["output_tokens"],
                         "acceptance_rate": acc["acceptance_rate"], "tokens_per_step": acc["tokens_per_step"],
                         "verified_tokens_per_step": acc["verified_tokens_per_step"],
                         "baseline_step_ms": pred["baseline_step_s"] * 1e3, "spec_step_ms": pred["spec_step_s"] * 1e3,
                         "baseline_tok_s": pred["baseline_tok_s"], "predicted_tok_s": pred["spec_tok_s"],
                         "predicted_speedup": pred["speedup"]})
    per_bin = pd.DataFrame(rows)
    scale = 24.0 / span_h  # the log's span stands for a day
    if abs(span_h - 24.0) > bin_s / 3600.0:
        notes.append(f"the log spans {span_h:.1f} h; hours per day scale it to 24 h (x{scale:.2f})")
    summary = []
    for option, part in per_bin.groupby("option", sort=False):
        # costmodel.payback_hours' rule, bin by bin (one concurrency can carry several mixes):
        # a busy hour at speedup s frees 1 - 1/s server-hours; payback = downtime / freed per
        # hour. Below one request in flight the server is busy only part of the bin (<= c).
        hours = bin_s / 3600.0 * scale * part["concurrency"].clip(upper=1.0)
        freed = float((hours * (1.0 - 1.0 / part["predicted_speedup"])).sum())
        downtime_h = restarts * load_time_s / 3600.0
        payback = downtime_h / (freed / 24.0) if freed > 0 else math.inf
        tokens = part["output_tokens"].sum()
        weights = part["output_tokens"] if tokens else part["concurrency"]
        summary.append({
            "option": option, "method": part["method"].iloc[0], "k": int(part["k"].iloc[0]),
            "acceptance_rate": overall.loc[option, "acceptance_rate"],
            "mean_acceptance_length": overall.loc[option, "mean_acceptance_length"],
            "tokens_per_step": overall.loc[option, "tokens_per_step"],
            "day_mean_concurrency": float(part["concurrency"].sum() * bin_s / 3600.0 / span_h),
            "baseline_tok_s": float(np.average(part["baseline_tok_s"], weights=weights)),
            "predicted_tok_s": float(np.average(part["predicted_tok_s"], weights=weights)),
            "predicted_speedup": float(np.average(part["predicted_speedup"], weights=weights)),
            "min_bin_speedup": float(part["predicted_speedup"].min()),
            "hours_losing_per_day": float(hours[part["predicted_speedup"] < 1].sum()),
            "server_hours_saved_per_day": freed, "restart_downtime_h": downtime_h,
            "payback_hours": payback, "pays_back": math.isfinite(payback),
        })
    per_option = pd.DataFrame(summary)
    per_option["best_k"] = per_option.groupby("method")["server_hours_saved_per_day"].transform("max") == \
        per_option["server_hours_saved_per_day"]
    return TrafficDay(per_bin, per_option, profile, span_h, notes)


def given_cost_model(spec: dict[str, Any]) -> CalibratedStepTime:
    """A step-time model from figures you give: ``{"baseline": [{"batch": 1, "step_ms": 20}, ...],
    "verify": {"overhead_s": ..., "per_token_s": ..., "exponent": ...}}``."""
    try:
        base = pd.DataFrame(spec["baseline"])
        base = pd.DataFrame({"batch": base["batch"].astype(float), "step_s": base["step_ms"].astype(float) / 1e3})
        verify = VerifyCost(**{"source": "given", **spec["verify"]})
    except (KeyError, TypeError, ValueError) as exc:
        raise SpeclabError(f"The cost model needs baseline [{{batch, step_ms}}] and verify {{per_token_s, ...}} "
                           f"({exc}).") from None
    return CalibratedStepTime(base, verify)


def traffic_vs_benchmark(day: TrafficDay, benchmark: pd.DataFrame | None) -> pd.DataFrame:
    """Traffic-based prediction next to the benchmark-based one (01-baseline's predictions,
    ``category == "all"``) per option, at the concurrencies the benchmark predicted."""
    traffic = day.per_option[["option", "acceptance_rate", "mean_acceptance_length", "predicted_speedup",
                              "day_mean_concurrency"]].rename(columns={
        "acceptance_rate": "traffic_acceptance_rate", "mean_acceptance_length": "traffic_mean_acceptance_length",
        "predicted_speedup": "traffic_day_speedup"})
    if benchmark is None or benchmark.empty:
        return traffic
    bench = benchmark[benchmark["category"] == "all"]
    bench = bench.groupby("option", as_index=False).agg(
        benchmark_acceptance_rate=("acceptance_rate", "mean"),
        benchmark_mean_acceptance_length=("mean_acceptance_length", "mean"),
        benchmark_speedup_min=("predicted_speedup", "min"), benchmark_speedup_max=("predicted_speedup", "max"))
    return traffic.merge(bench, on="option", how="outer")
