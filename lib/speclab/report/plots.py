"""Static seaborn figures (the HTML report must stand alone): one function per plot."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

sns.set_theme(style="whitegrid", context="notebook")


def _empty(message: str) -> Figure:
    fig, ax = plt.subplots(figsize=(6, 1.2))
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center")
    return fig


def throughput_vs_concurrency(levels: pd.DataFrame) -> Figure:
    """Output tok/s against concurrency, one line per arm."""
    if levels.empty or "output_tok_s" not in levels:
        return _empty("no levels measured")
    fig, ax = plt.subplots(figsize=(7, 4))
    sns.lineplot(data=levels, x="concurrency", y="output_tok_s", hue="arm", marker="o", ax=ax,
                 errorbar=None)
    ax.set(xscale="log", xlabel="concurrency (requests in flight)", ylabel="output tok/s",
           title="Throughput vs concurrency")
    ax.set_xticks(sorted(levels["concurrency"].unique()))
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.get_xaxis().set_minor_formatter(matplotlib.ticker.NullFormatter())  # no 2x10^0 labels
    fig.tight_layout()
    return fig


def latency_distributions(requests: pd.DataFrame) -> Figure:
    """TPOT and TTFT per request, by concurrency (and arm when several)."""
    ok = requests[requests["ok"].astype(bool)] if not requests.empty else requests
    if ok.empty:
        return _empty("no successful requests")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    hue = "arm" if "arm" in ok and ok["arm"].nunique() > 1 else None
    sns.boxplot(data=ok, x="concurrency", y=ok["tpot_s"] * 1e3, hue=hue, ax=axes[0])
    axes[0].set(ylabel="TPOT (ms per output token)", title="Time per output token")
    sns.boxplot(data=ok, x="concurrency", y=ok["ttft_s"] * 1e3, hue=hue, ax=axes[1])
    axes[1].set(ylabel="TTFT (ms)", title="Time to first token")
    fig.tight_layout()
    return fig


def category_bars(requests: pd.DataFrame) -> Figure:
    """Per-request decode speed by category and concurrency."""
    ok = requests[requests["ok"].astype(bool)].copy() if not requests.empty else requests
    if ok.empty:
        return _empty("no successful requests")
    ok["tok_s_per_request"] = ok["output_tokens"] / ok["e2e_s"]
    fig, ax = plt.subplots(figsize=(10, 4))
    sns.barplot(data=ok, x="category", y="tok_s_per_request", hue="concurrency", ax=ax, errorbar=None)
    ax.set(xlabel="", ylabel="tok/s per request", title="Per-request speed by category")
    ax.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    return fig


def tokens_per_chunk(requests: pd.DataFrame) -> Figure:
    """Tokens per streamed chunk: 1 without speculation, more when drafts are accepted."""
    ok = requests[requests["ok"].astype(bool)] if not requests.empty else requests
    if ok.empty or "tokens_per_chunk_mean" not in ok:
        return _empty("no chunk data")
    fig, ax = plt.subplots(figsize=(10, 3.5))
    hue = "arm" if "arm" in ok and ok["arm"].nunique() > 1 else "concurrency"
    sns.barplot(data=ok, x="category", y="tokens_per_chunk_mean", hue=hue, ax=ax, errorbar=None)
    ax.set(xlabel="", ylabel="tokens per chunk", title="Tokens per streamed chunk")
    ax.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    return fig


def speedup_forest(comparison: pd.DataFrame, title: str = "Speedup over baseline (95 % CI)") -> Figure:
    """Speedup with its CI per category, one panel per concurrency; 1.0 = no change."""
    if comparison.empty:
        return _empty("no paired requests")
    levels = sorted(comparison["concurrency"].unique())
    fig, axes = plt.subplots(1, len(levels), figsize=(4 * len(levels), 0.4 * comparison["category"].nunique() + 1.6),
                             sharey=True, squeeze=False)
    colors = {"faster": "tab:green", "slower": "tab:red"}
    for ax, level in zip(axes[0], levels, strict=True):
        cell = comparison[comparison["concurrency"] == level].reset_index(drop=True)
        for i, row in cell.iterrows():
            color = colors.get(row["verdict"], "tab:gray")
            if pd.notna(row.get("ci_low")) and pd.notna(row.get("ci_high")):
                ax.plot([row["ci_low"], row["ci_high"]], [i, i], color=color, lw=2)
            ax.plot(row["speedup"], i, "o", color=color)
        ax.axvline(1.0, color="black", lw=0.8, ls="--")
        ax.set_yticks(range(len(cell)))
        ax.set_yticklabels(cell["category"])
        ax.set(title=f"concurrency {level}", xlabel="speedup (x)")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


_VERDICT_SHORT = {"faster": "faster", "slower": "slower", "no clear difference": "unclear",
                  "too few prompts": "too few"}


def speedup_heatmap(comparison: pd.DataFrame, title: str = "Speedup by category and concurrency") -> Figure:
    """Category x concurrency grid of paired speedups for one option.

    Colour is the speedup on a log scale centred on 1 (green faster, red slower); each cell
    says the speedup and the verdict; a hatched cell is one whose interval includes 1 (or
    that has too few prompts for one), so its colour is not a finding. The ``all`` row sits
    on top.
    """
    if comparison.empty or "speedup" not in comparison:
        return _empty("no paired requests")
    from matplotlib.colors import LogNorm
    from matplotlib.patches import Rectangle

    frame = comparison.copy()
    categories = sorted(c for c in frame["category"].unique() if c != "all")
    rows = (["all"] if (frame["category"] == "all").any() else []) + categories
    levels = sorted(int(c) for c in frame["concurrency"].unique())
    grid = frame.pivot_table(index="category", columns="concurrency", values="speedup", aggfunc="first")
    grid = grid.reindex(index=rows, columns=levels)
    cells = frame.set_index(["category", "concurrency"])
    finite = grid.to_numpy(dtype=float)
    finite = finite[np.isfinite(finite) & (finite > 0)]
    # symmetric on a log scale, at least 0.8x..1.25x so small effects are not painted loud
    spread = max(1.25, float(np.exp(np.abs(np.log(finite)).max())) if finite.size else 1.25)
    norm = LogNorm(vmin=1 / spread, vmax=spread)
    fig, ax = plt.subplots(figsize=(1.5 * len(levels) + 3.6, 0.5 * len(rows) + 1.6))
    image = ax.imshow(np.ma.masked_invalid(grid.to_numpy(dtype=float)), cmap="RdYlGn", norm=norm, aspect="auto")
    for y, category in enumerate(rows):
        for x, level in enumerate(levels):
            if (category, level) not in cells.index:
                continue
            cell = cells.loc[(category, level)]
            speedup, verdict = cell["speedup"], str(cell["verdict"])
            text = f"{speedup:.2f}x\n{_VERDICT_SHORT.get(verdict, verdict)}" if pd.notna(speedup) else "–"
            weight = "bold" if verdict in ("faster", "slower") else "normal"
            ax.text(x, y, text, ha="center", va="center", fontsize=8.5, fontweight=weight, color="black")
            if verdict not in ("faster", "slower"):
                ax.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, hatch="///",
                                       edgecolor="#777777", linewidth=0))
    if rows and rows[0] == "all" and len(rows) > 1:
        ax.axhline(0.5, color="black", linewidth=1.5)
    ax.set_xticks(range(len(levels)), [str(c) for c in levels])
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_ylabel("")
    ax.grid(False)
    ax.set_title(title)
    bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.03)
    bar.set_label("speedup (x), log scale")
    ticks = [t for t in (0.25, 0.33, 0.5, 0.67, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0) if 1 / spread <= t <= spread]
    bar.set_ticks(ticks, labels=[f"{t:g}x" for t in ticks])
    bar.ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    fig.text(0.01, 0.01, "hatched: the interval includes 1, or too few prompts for one (no finding)",
             fontsize=8, color="#555555")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


LABEL_COLOURS = {"measured": "tab:green", "fitted": "tab:blue", "borrowed": "tab:orange", "assumed": "tab:red"}


def speedup_waterfall(parts: pd.DataFrame, title: str = "Predicted speedup in parts",
                      columns: int = 4) -> Figure:
    """One waterfall per concurrency from :func:`speclab.predict.stepparts.decompose_speedup`:
    the naive speedup (1 + what acceptance adds), each part's cost, the speculative overhead,
    the prediction; bars coloured by how the part is known (measured, fitted, borrowed, assumed)."""
    if parts.empty:
        return _empty("no decomposition")
    levels = list(dict.fromkeys(parts["concurrency"]))
    rows = int(np.ceil(len(levels) / columns))
    fig, axes = plt.subplots(rows, min(columns, len(levels)), figsize=(3.3 * min(columns, len(levels)), 3.4 * rows),
                             sharey=True, squeeze=False)
    top = float(parts["speedup_after"].max()) * 1.08
    for ax, c in zip(axes.flat, levels, strict=False):
        part = parts[parts["concurrency"] == c]
        names = [*part["part"], "prediction"]
        for i, row in enumerate(part.itertuples()):
            start = row.speedup_after - row.speedup_change
            ax.bar(i, row.speedup_change, bottom=start, color=LABEL_COLOURS.get(row.label, "grey"), width=0.7)
        final = float(part["speedup"].iloc[0])
        ax.bar(len(names) - 1, final, color="black" if final < 1 else "dimgrey", width=0.7)
        ax.axhline(1.0, color="black", lw=0.8, ls=":")
        ax.set_xticks(range(len(names)), [n.replace("_", " ") for n in names], rotation=60, ha="right", fontsize=7)
        ax.set(ylim=(0, top), title=f"concurrency {c:g}: {final:.2f}x")
    for ax in list(axes.flat)[len(levels):]:
        ax.axis("off")
    axes[0][0].set_ylabel("speedup (tokens per step x T1 / T)")
    handles = [matplotlib.patches.Patch(color=col, label=lab) for lab, col in LABEL_COLOURS.items()]
    fig.legend(handles=handles, loc="upper right", fontsize=8, ncol=4)
    fig.suptitle(title, x=0.02, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig
