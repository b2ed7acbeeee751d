"""What a restart costs and when it pays back, over the user's expected day.

* :class:`TrafficSlice`: part of an expected day, hours at one concurrency.
* :func:`restart_cost_s`: the one rule 01 and 05 share for what a restart costs.
* :func:`payback_hours`: hours of operation until a restart pays for itself, judged only at the
  concurrencies a sweep measured: traffic beyond the sweep is marked, never extrapolated.
* :func:`restart_payback`: the same from a prediction table (01-baseline).

Analysis layer: arithmetic on tables and run-folder manifests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from speclab.errors import SpeclabError
from speclab.predict.timings import load_time_s as run_load_time_s

__all__ = ["BEYOND_SWEEP", "TrafficSlice", "payback_hours", "restart_cost_s", "restart_payback"]

BEYOND_SWEEP = "beyond the sweep"


class TrafficSlice(BaseModel):
    """Part of an expected day: this many hours at this concurrency."""

    model_config = ConfigDict(extra="forbid")

    concurrency: float = Field(..., gt=0, description="sequences in flight")
    hours_per_day: float = Field(..., ge=0, le=24, description="hours per day at that concurrency")


def restart_cost_s(restart_minutes: float | None, *measured_load_s: float | None) -> tuple[float | None, str]:
    """Seconds one restart costs, and where the figure comes from. One rule for 01 and 05:
    ``restart_minutes`` when the user gave it (it knows the restart's whole cost: drain,
    rollout, warm-up), else the first load time speclab measured when it started a server
    (``measured_load_s``, in the caller's order of preference), else unknown."""
    if restart_minutes:
        return float(restart_minutes) * 60.0, "restart_minutes (given)"
    for measured in measured_load_s:
        if measured:
            return float(measured), "the load time measured when speclab started the server"
    return None, "unknown"


def _within(table: Mapping[float, float]) -> Callable[[float], float]:
    """Linear between the measured concurrencies; NaN outside them (beyond the sweep)."""
    keys = sorted(table)
    xs, ys = np.array(keys, float), np.array([table[k] for k in keys], float)

    def lookup(concurrency: float) -> float:
        if concurrency < xs[0] - 1e-9 or concurrency > xs[-1] + 1e-9:
            return math.nan
        return float(np.interp(concurrency, xs, ys))

    return lookup


def payback_hours(
    load_time_s: float,
    speedup_at: Callable[[float], float] | Mapping[float, float],
    traffic: Sequence[TrafficSlice | Mapping[str, float]],
    restarts: int = 1,
) -> pd.DataFrame:
    """Hours of operation until a restart for a speculative option pays for itself.

    A restart takes the server away for ``load_time_s`` per restart. An hour served at
    concurrency c with speedup s needs only 1/s hours of server time: it frees ``1 - 1/s``
    server-hours (negative when s < 1). Payback = downtime / freed server-hours per calendar
    hour, averaged over the traffic profile's day; ``inf`` when the option saves nothing.

    A slice whose concurrency lies outside the measured ones (``speedup_at`` a mapping) is
    marked :data:`BEYOND_SWEEP` in ``judged``, its speedup left empty and its hours left out of
    the payback, which the total row then says (``hours_judged``). A callable ``speedup_at``
    is trusted everywhere. Returns one row per slice plus a ``total`` row carrying ``payback_hours``.
    """
    slices = [s if isinstance(s, TrafficSlice) else TrafficSlice(**s) for s in traffic]
    if not slices:
        raise SpeclabError("Give a traffic profile: at least one {concurrency, hours_per_day}.")
    total_hours = sum(s.hours_per_day for s in slices)
    if total_hours > 24 + 1e-9:
        raise SpeclabError(f"The traffic profile adds up to {total_hours:g} hours per day; keep it within 24.")
    lookup = speedup_at if callable(speedup_at) else _within(dict(speedup_at))
    swept = "" if callable(speedup_at) else f" (measured {min(speedup_at):g} to {max(speedup_at):g})"
    rows = []
    for s in slices:
        speedup = float(lookup(s.concurrency))
        if math.isnan(speedup):
            rows.append({"concurrency": s.concurrency, "hours_per_day": s.hours_per_day, "speedup": None,
                         "server_hours_freed_per_day": None, "judged": BEYOND_SWEEP + swept})
            continue
        freed = s.hours_per_day * (1.0 - 1.0 / speedup) if speedup > 0 else -math.inf
        rows.append({"concurrency": s.concurrency, "hours_per_day": s.hours_per_day, "speedup": speedup,
                     "server_hours_freed_per_day": freed, "judged": "yes"})
    frame = pd.DataFrame(rows)
    judged = frame[frame["judged"] == "yes"]
    freed_per_day = float(judged["server_hours_freed_per_day"].sum())
    downtime_h = restarts * load_time_s / 3600.0
    payback = downtime_h / (freed_per_day / 24.0) if freed_per_day > 0 else math.inf
    hours_judged = float(judged["hours_per_day"].sum())
    total = {"concurrency": None, "hours_per_day": total_hours, "speedup": None,
             "server_hours_freed_per_day": freed_per_day,
             "judged": "yes" if hours_judged == total_hours
             else f"{hours_judged:g} of {total_hours:g} h a day (the rest {BEYOND_SWEEP})"}
    frame = pd.concat([frame, pd.DataFrame([total])], ignore_index=True)
    frame["restart_downtime_h"] = downtime_h
    frame["payback_hours"] = [None] * (len(frame) - 1) + [payback]
    frame["pays_back"] = [None] * (len(frame) - 1) + [math.isfinite(payback)]
    frame.attrs["beyond_sweep"] = [float(c) for c in frame.loc[frame["judged"].str.startswith(BEYOND_SWEEP),
                                                               "concurrency"]]
    return frame


def restart_payback(
    prediction: pd.DataFrame,
    traffic: Sequence[TrafficSlice | Mapping[str, float]],
    *,
    load_time_s: float | None = None,
    baseline_run_dir: str | Path | None = None,
    category: str = "all",
    restarts: int = 1,
) -> pd.DataFrame:
    """Hours until restarting into the predicted option pays back (``inf``: never).

    ``prediction``: a :func:`speclab.predict.predictions.predict_from_baseline` table (its
    ``category`` rows give speedup per concurrency, linear between levels, never beyond them);
    ``load_time_s`` defaults to the baseline run's measured ``server.load_time_s``.
    """
    if load_time_s is None and baseline_run_dir is not None:
        load_time_s = run_load_time_s(baseline_run_dir)
    if load_time_s is None:
        raise SpeclabError("Give load_time_s or a baseline run whose manifest records server.load_time_s.")
    rows = prediction[prediction["category"] == category]
    if rows.empty:
        raise SpeclabError(f"The prediction has no rows for category {category!r}.")
    table = dict(zip(rows["concurrency"].astype(float), rows["predicted_speedup"].astype(float), strict=True))
    return payback_hours(load_time_s, table, traffic, restarts=restarts)
