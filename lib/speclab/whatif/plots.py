"""Static figures of a what-if: the tornado (each input's range against the speedup it gives,
one panel per concurrency)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from speclab.whatif.predict import WhatIf

__all__ = ["LABEL_COLOURS", "tornado_figure"]

LABEL_COLOURS = {"measured": "#2a9d8f", "fitted": "#457b9d", "borrowed": "#e9c46a", "assumed": "#e76f51"}


def tornado_figure(result: WhatIf, concurrencies: Sequence[int] | None = None, *, top: int = 8, cols: int = 4) -> Any:
    """One panel per concurrency: a bar per input from the speedup at its range's low end to the
    one at its high end (others at their middle), widest first, coloured by label; the dashed
    line is 1 (break-even), the dot the prediction, the grey band its 90 % interval."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    rows = [r for r in result.rows if concurrencies is None or r.concurrency in set(concurrencies)]
    n = len(rows)
    cols = max(1, min(cols, n))
    nrows = (n + cols - 1) // cols
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 0.42 * top * nrows + 1.2), squeeze=False)
    for ax, row in zip(axes.flat, rows, strict=False):
        bars = [b for b in row.tornado if b.swing > 1e-6][:top][::-1]
        for y, bar in enumerate(bars):
            lo, hi = sorted((bar.at_low, bar.at_high))
            ax.barh(y, hi - lo, left=lo, color=LABEL_COLOURS.get(bar.label, "grey"), height=0.6)
        ax.set_yticks(range(len(bars)))
        ax.set_yticklabels([b.input for b in bars], fontsize=8)
        ax.axvspan(row.low, row.high, color="0.85", zorder=0)
        ax.axvline(1.0, color="black", linestyle="--", linewidth=1)
        ax.plot([row.speedup], [len(bars) - 0.5], "o", color="black")
        ax.set_title(f"c={row.concurrency}: {row.speedup:.2f}x ({row.verdict})", fontsize=10)
        ax.set_xlabel("speedup")
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in LABEL_COLOURS.values()]
    fig.legend(handles, list(LABEL_COLOURS), loc="lower center", ncol=4, frameon=False)
    fig.suptitle(f"{result.scenario.name}: what each input's range does to the speedup", fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    return fig
