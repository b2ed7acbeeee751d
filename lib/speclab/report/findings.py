"""Plain-sentence findings for the report: what a notebook's analysis means, in a few lines.

Each function takes an analysis result (data, not a server) and returns the sentences and
tidy tables that notebook writes into its report section (:mod:`speclab.sections`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from speclab.profiling import ProfileReport

# Buckets whose time does not grow with tokens per step are "amortised" by each accepted token.
_SUMMARY_ROWS = ("(all buckets)", "(step wall)")


def _rank_of(report: ProfileReport, rank: int | None) -> int | None:
    if rank is not None:
        return rank
    summary = report.summary
    return int(summary["rank"].min()) if not summary.empty else None


def decode_time_by_bucket(report: ProfileReport, rank: int | None = None) -> pd.DataFrame:
    """One rank's decode-step time per bucket: share and milliseconds per step, largest first."""
    rank = _rank_of(report, rank)
    summary = report.summary
    decode = summary[(summary["rank"] == rank) & (summary["step_kind"] == "decode") & (summary["time_us"] > 0)]
    if decode.empty:  # no step annotations (e.g. SGLang): the whole trace stands in
        decode = summary[(summary["rank"] == rank) & (summary["time_us"] > 0)]
        decode = decode[decode["step_kind"] == decode["step_kind"].iloc[0]] if not decode.empty else decode
    frame = decode.assign(time_per_step_ms=decode["time_per_step_us"] / 1e3)
    return frame[["bucket", "share", "time_per_step_ms", "tokens_per_step"]].sort_values(
        "share", ascending=False).reset_index(drop=True)


def token_scaling(report: ProfileReport, rank: int | None = None) -> pd.DataFrame:
    """Per bucket: how its time per step grows with tokens per step (the predictor's input)."""
    rank = _rank_of(report, rank)
    scaling = report.scaling
    frame = scaling[(scaling["rank"] == rank) & (scaling["mean_time_us"] > 0)]
    frame = frame[~frame["bucket"].isin(_SUMMARY_ROWS)]
    columns = ["bucket", "mean_time_us", "slope_us_per_token", "growth_over_range", "r2", "scales_with_tokens"]
    return frame[columns].sort_values("mean_time_us", ascending=False).reset_index(drop=True)


def _micro(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.2g}"


def _percent(value: float) -> str:
    return f"{value * 100:.0f} %" if value >= 0.01 else f"{value * 100:.1f} %"


def profile_findings(report: ProfileReport, rank: int | None = None, other_bucket: str = "other") -> list[str]:
    """Three or four sentences: decode time by bucket, what grows with tokens, what no rule matched."""
    rank = _rank_of(report, rank)
    if rank is None:
        return ["The trace held no operations speclab could bucket."]
    shares = decode_time_by_bucket(report, rank)
    steps = report.steps[(report.steps["rank"] == rank) & (report.steps["step_kind"] == "decode")] \
        if not report.steps.empty else report.steps
    sentences = []
    if not steps.empty:
        sentences.append(
            f"Rank {rank} ran {len(steps)} decode steps in the window, {steps['tokens'].mean():.1f} tokens per "
            f"step on average, {steps['wall_us'].mean() / 1e3:.1f} ms per step.")
    top = shares[shares["share"] >= 0.01].head(5)
    if not top.empty:
        listed = ", ".join(f"{row.bucket} {_percent(row.share)}" for row in top.itertuples())
        sentences.append(f"Decode time by bucket: {listed}.")
    scaling = token_scaling(report, rank)
    fitted = scaling[scaling["slope_us_per_token"].notna()]
    if fitted.empty:
        sentences.append("Every decode step had the same number of tokens, so what grows with tokens per step "
                         "cannot be read from this trace: profile at mixed concurrency (or with speculation on).")
    else:
        grows = fitted[fitted["scales_with_tokens"]]
        flat = fitted[~fitted["scales_with_tokens"]]
        if not grows.empty:
            listed = ", ".join(f"{row.bucket} (+{_micro(row.slope_us_per_token)} µs per token)"
                               for row in grows.head(4).itertuples())
            sentences.append(f"Grows with tokens per step (verification pays for it): {listed}.")
        if not flat.empty:
            share = shares.set_index("bucket")["share"].reindex(flat["bucket"]).fillna(0).sum()
            sentences.append(f"Flat in tokens per step (amortised by every accepted token): "
                             f"{', '.join(flat['bucket'].head(5))}, {_percent(float(share))} of decode time.")
    unmatched = shares[shares["bucket"] == other_bucket]["share"]
    if len(unmatched) and float(unmatched.iloc[0]) >= 0.05:
        sentences.append(f"No rule matched {_percent(float(unmatched.iloc[0]))} of decode time: "
                         "add bucket rules before trusting the split.")
    return sentences


def profile_section_tables(report: ProfileReport, rank: int | None = None) -> dict[str, pd.DataFrame]:
    """The tables a profile section carries (tidy, units in the names)."""
    scaling = token_scaling(report, rank)
    growth = scaling.pop("growth_over_range").replace([np.inf, -np.inf], np.nan)
    scaling.insert(3, "growth_over_range_fraction", growth)
    return {"decode_time_by_bucket": decode_time_by_bucket(report, rank), "token_scaling": scaling}


def write_profile_section(run_dir: str | Path, report: ProfileReport, rank: int | None = None) -> Path:
    """00-profile's report section: findings, the two tables and both figures; returns its folder."""
    import matplotlib.pyplot as plt

    from speclab.errors import SpeclabError
    from speclab.profiling import plot_bucket_scaling, plot_step_breakdown
    from speclab.sections import write_section

    tables = profile_section_tables(report, rank)
    plots: list[tuple[str, Callable[..., Any]]] = [("time_per_step_by_bucket", plot_step_breakdown)]
    if tables["token_scaling"]["slope_us_per_token"].notna().any():
        plots.append(("bucket_time_vs_tokens", plot_bucket_scaling))
    else:  # one token count per step: nothing to fit, the sentences say so
        tables.pop("token_scaling")
    figures = {}
    for name, plot in plots:
        try:
            figures[name] = plot(report, rank)
        except SpeclabError:
            continue  # no engine steps: the sentences say so
    try:
        return write_section(run_dir, kind="profile", title="Where decode time goes (00-profile)",
                             summary=profile_findings(report, rank), tables=tables,
                             figures=figures)
    finally:
        for figure in figures.values():
            plt.close(figure)
