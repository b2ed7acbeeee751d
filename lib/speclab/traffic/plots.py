"""Figures of a predicted traffic day (static seaborn, for notebooks and the report)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

__all__ = ["acceptance_bars", "day_profile"]


def day_profile(per_bin: pd.DataFrame) -> Figure:
    """Concurrency through the day (top) and each option's predicted speedup (bottom)."""
    fig, axes = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    hours = (per_bin["start_s"] - per_bin["start_s"].min()) / 3600.0
    once = per_bin.assign(hours=hours).drop_duplicates("bin")
    sns.lineplot(data=once, x="hours", y="concurrency", ax=axes[0], color="0.3")
    axes[0].set_ylabel("requests in flight")
    axes[0].set_title("Concurrency rebuilt from the log's timestamps")
    sns.lineplot(data=per_bin.assign(hours=hours), x="hours", y="predicted_speedup", hue="option", ax=axes[1])
    axes[1].axhline(1.0, color="red", lw=1, ls="--")
    axes[1].set_ylabel("predicted speedup")
    axes[1].set_xlabel("hours since the log's first request")
    fig.tight_layout()
    return fig


def acceptance_bars(table: pd.DataFrame, key: str) -> Figure:
    """Acceptance rate per ``key`` (category, tenant, output_length_bucket) and option."""
    fig, ax = plt.subplots(figsize=(9, 3.6))
    sns.barplot(data=table.assign(**{key: table[key].astype(str)}), x=key, y="acceptance_rate", hue="option",
                ax=ax, errorbar=None)
    ax.set_ylabel("acceptance rate (replayed)")
    ax.set_xlabel(key.replace("_", " "))
    ax.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    return fig
