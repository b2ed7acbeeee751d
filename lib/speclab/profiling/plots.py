"""Static seaborn/matplotlib figures of a ProfileReport."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from speclab.errors import SpeclabError
from speclab.profiling.analysis import ProfileReport

# --------------------------------------------------------------------------- plots


def plot_step_breakdown(report: ProfileReport, rank: int | None = None, *, kinds: Sequence[str] | None = None,
                        ax: Any = None) -> Any:
    """Stacked bars of bucket time per step for one rank (the lowest by default); returns the figure."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    frame = report.breakdown
    if frame.empty:
        raise SpeclabError("The report has no engine steps to plot; was the trace captured under load?")
    rank = int(frame["rank"].min()) if rank is None else rank
    frame = frame[frame["rank"] == rank]
    if kinds:
        frame = frame[frame["step_kind"].isin(kinds)]
    wide = frame.pivot_table(index="step", columns="bucket", values="time_us", aggfunc="sum", observed=False) / 1000.0
    wide = wide.loc[:, wide.sum() > 0]
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(6.0, min(18.0, 0.12 * len(wide) + 4)), 4.5))
    else:
        fig = ax.figure
    colors = sns.color_palette("tab10", n_colors=max(len(wide.columns), 1))
    bottom = np.zeros(len(wide))
    for color, bucket in zip(colors, wide.columns, strict=False):
        ax.bar(wide.index, wide[bucket].to_numpy(), bottom=bottom, color=color, label=str(bucket), width=0.9)
        bottom += wide[bucket].to_numpy()
    ax.set_xlabel("engine step")
    ax.set_ylabel("time (ms)")
    ax.set_title(f"Rank {rank}: time per step by bucket")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def plot_bucket_scaling(report: ProfileReport, rank: int | None = None, *, ax: Any = None) -> Any:
    """Time per step against tokens per step, one colour per bucket, with the fitted lines
    of the scaling table (decode steps by default); returns the figure."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    frame = report.breakdown
    if frame.empty:
        raise SpeclabError("The report has no engine steps to plot; was the trace captured under load?")
    rank = int(frame["rank"].min()) if rank is None else rank
    frame = frame[(frame["rank"] == rank) & frame["step_kind"].isin(report.params.scaling_kinds)]
    frame = frame[frame.groupby("bucket", observed=True)["time_us"].transform("sum") > 0]
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
    else:
        fig = ax.figure
    buckets = [str(b) for b in frame["bucket"].astype(str).unique()]
    palette = dict(zip(buckets, sns.color_palette("tab10", n_colors=max(len(buckets), 1)), strict=False))
    sns.scatterplot(data=frame.assign(bucket=frame["bucket"].astype(str), time_ms=frame["time_us"] / 1000.0),
                    x="tokens", y="time_ms", hue="bucket", palette=palette, ax=ax, s=25)
    fits = report.scaling[(report.scaling["rank"] == rank) & report.scaling["bucket"].isin(buckets)]
    for row in fits.itertuples():
        if np.isnan(row.slope_us_per_token):
            continue
        xs = np.array([row.tokens_min, row.tokens_max])
        ax.plot(xs, (row.intercept_us + row.slope_us_per_token * xs) / 1000.0, color=palette[row.bucket],
                linestyle="-" if row.scales_with_tokens else ":", linewidth=1.2)
    ax.set_xlabel("tokens per step")
    ax.set_ylabel("time per step (ms)")
    ax.set_title(f"Rank {rank}: which buckets grow with tokens per step (solid: significant)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    return fig

