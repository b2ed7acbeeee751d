"""ipywidgets explorers for interactive sessions (headless HTML stays static)."""

from __future__ import annotations

from typing import Any

from speclab.predict import compare
from speclab.report import formatting, plots
from speclab.runfolder import RunData


def comparison_explorer(runs: list[RunData]) -> Any:
    """Pick a baseline and an option run, a category and a concurrency; see pairs and plots."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    if len(runs) < 2:
        return widgets.HTML("<i>Explorer: needs a baseline and at least one option run.</i>")
    names = {f"{r.label} · {r.path.name}": r for r in runs}
    keys = list(names)
    base_pick = widgets.Dropdown(options=keys, value=keys[0], description="baseline")
    treat_pick = widgets.Dropdown(options=keys, value=keys[1], description="option")
    categories = sorted({c for r in runs for c in r.requests.get("category", [])})
    category_pick = widgets.Dropdown(options=["all", *categories], value="all", description="category")
    levels = sorted({int(c) for r in runs for c in r.requests.get("concurrency", [])})
    level_pick = widgets.Dropdown(options=["all", *levels], value="all", description="concurrency")
    out = widgets.Output(layout={"border": "1px solid #e5e7eb"})

    def refresh(*_: Any) -> None:
        base, treat = names[base_pick.value], names[treat_pick.value]
        pairs = compare.pair_requests(base.requests, treat.requests)
        if category_pick.value != "all":
            pairs = pairs[pairs["category"] == category_pick.value]
        if level_pick.value != "all":
            pairs = pairs[pairs["concurrency"] == level_pick.value]
        table = compare.paired_speedups(base.requests, treat.requests)
        if category_pick.value != "all":
            table = table[table["category"] == category_pick.value]
        if level_pick.value != "all":
            table = table[table["concurrency"] == level_pick.value]
        with out:
            out.clear_output(wait=True)
            display(formatting.styled(table))
            fig = plots.speedup_forest(table)
            display(fig)
            plt.close(fig)
            display(formatting.styled(pairs[["concurrency", "category", "prompt_id", "speed_base_tok_s",
                                              "speed_treat_tok_s", "tpot_s_base", "tpot_s_treat"]]))

    for pick in (base_pick, treat_pick, category_pick, level_pick):
        pick.observe(refresh, names="value")
    refresh()
    box = widgets.VBox([widgets.HBox([base_pick, treat_pick]), widgets.HBox([category_pick, level_pick]), out])
    box.add_class("speclab-explorer")  # a stable hook for the browser test
    return box
