"""Static seaborn figures for 04-moespec (one function per plot)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from speclab.moe.models import VerifyCurve

sns.set_theme(style="whitegrid", context="notebook")


def distinct_experts(curves: pd.DataFrame, experts: int) -> Figure:
    """Distinct experts per layer vs tokens verified, one line per routing (model vs trace)."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    sns.lineplot(data=curves, x="tokens", y="distinct_experts", hue="routing", style="source", markers=True,
                 dashes=True, ax=ax, errorbar=None)
    ax.axhline(experts, color="grey", lw=0.8, ls=":")
    ax.set(xlabel="tokens verified per layer (n)", ylabel="distinct experts touched",
           title=f"Distinct experts vs tokens verified ({experts} experts)")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def verify_cost(frames: dict[str, VerifyCurve]) -> Figure:
    """Layer step time vs distinct experts (left) and vs tokens (right), measured points and fitted lines."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, curve in frames.items():
        pts = curve.points
        for routing, part in pts.groupby("routing"):
            left.scatter(part["distinct_experts"], part["step_s"] * 1e3, s=18, label=f"{name} {routing}")
            right.plot(part["tokens"], part["step_s"] * 1e3, marker="o", ms=3, label=f"{name} {routing}")
        xs = sorted(pts["distinct_experts"])
        left.plot(xs, [curve.step_s(x) * 1e3 for x in xs], color="black", lw=0.8)
    left.set(xlabel="distinct experts in the step", ylabel="layer step (ms)", title="Time follows distinct experts")
    right.set(xscale="log", xlabel="tokens in the step", ylabel="layer step (ms)", title="Time vs tokens verified")
    left.legend(fontsize=7)
    fig.tight_layout()
    return fig


def budget_sweep(table: pd.DataFrame) -> Figure:
    """Verify cost and routing mass kept against the budget, per strategy."""
    fig, ax = plt.subplots(figsize=(7, 4))
    sns.lineplot(data=table, x="budget", y="verify_cost_x", hue="strategy", marker="o", ax=ax, errorbar=None)
    ax.set(xscale="log", xlabel="budget B (experts per layer)", ylabel="verify cost (x one-token layer step)",
           title=f"Expert budget, {int(table['tokens'].iloc[0])}-token verify group ({table['routing'].iloc[0]})")
    twin = ax.twinx()
    sns.lineplot(data=table, x="budget", y="mass_kept", hue="strategy", ax=twin, errorbar=None, ls="--",
                 legend=False)
    twin.set(ylabel="routing mass kept (dashed, proxy)", ylim=(0, 1.05))
    twin.grid(False)
    fig.tight_layout()
    return fig


def seeds_speedup(table: pd.DataFrame, band: tuple[float, float]) -> Figure:
    """Predicted speedup per concurrency with and without the best budget, the measured band shaded."""
    data = table.copy()
    data["budget"] = data["budget"].astype(str)
    fig, ax = plt.subplots(figsize=(8, 4.2))
    sns.lineplot(data=data, x="concurrency", y="predicted_speedup", hue="option", style="budget", ax=ax,
                 errorbar=None, markers=True)
    ax.axhspan(1 + band[0], 1 + band[1], color="tab:red", alpha=0.12, label="measured n-gram band")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set(xscale="log", xlabel="concurrency", ylabel="predicted speedup",
           title="Seeds' case: Kimi-K2.5 on 8 PCIe GPUs")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig
