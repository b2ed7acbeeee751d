"""The what-if as text: what ``speclab whatif`` and ``speclab explain-seeds`` print.

The regime first (model, GPU, engine and version, option, where acceptance comes from), then
one line per concurrency (speedup, 90 % interval, verdict, where the baseline step comes from),
the sentence that says what would flip each verdict, the parts of the step at each concurrency
with their labels, the inputs with their ranges and sources, and the notes.
"""

from __future__ import annotations

import pandas as pd

from speclab.whatif.predict import WhatIf

__all__ = ["parts_table", "render", "rows_table", "sensitivity_table"]


def regime(result: WhatIf) -> str:
    scn, dep = result.scenario, result.deployment
    engine = f"{scn.engine.name} {scn.engine.version or '(version not given)'}"
    par = scn.parallel
    acc = result.rows[0].acceptance if result.rows else {}
    return (f"{scn.model.name or dep.arch.name} ({dep.arch.total_params / 1e9:.0f}B, {dep.arch.active_params / 1e9:.1f}B "
            f"active) on {scn.hardware.count}x {dep.gpu.name}"
            + (f" ({dep.link.name})" if dep.link else "")
            + f", TP {par.tensor} EP {par.expert} PP {par.pipeline}; {engine}; {result.method_name} k={dep.k}; "
            f"acceptance {acc.get('tokens_per_step', float('nan')):.2f} tokens a step ({acc.get('label', '?')})")


def rows_table(result: WhatIf) -> pd.DataFrame:
    """One row per concurrency: the prediction, its interval and verdict, and the deciding input."""
    out = []
    for r in result.rows:
        first = next((f for f in r.flips if f.value is not None), None)
        out.append({"concurrency": r.concurrency, "speedup": round(r.speedup, 3), "low": round(r.low, 3),
                    "high": round(r.high, 3), "verdict": r.verdict, "baseline_step_ms": round(r.baseline_ms, 2),
                    "spec_step_ms": round(r.spec_ms, 2), "baseline_from": r.baseline_from,
                    "acceptance": f"{r.acceptance['tokens_per_step']:.2f} ({r.acceptance['label']})",
                    "nearest_flip": first.text if first else "none in reach"})
    return pd.DataFrame(out)


def sensitivity_table(result: WhatIf) -> pd.DataFrame:
    """Per concurrency and input: the flip value, the input's range and label, and the tornado's ends."""
    out = []
    for r in result.rows:
        bars = {b.input: b for b in r.tornado}
        for f in r.flips:
            bar = bars.get(f.input)
            out.append({"concurrency": r.concurrency, "input": f.input, "label": f.label,
                        "low": f.low, "high": f.high, "unit": f.unit,
                        "flips_at": None if f.value is None else round(f.value, 4), "flips_if": f.direction,
                        "inside_range": f.value is not None and f.distance == 0,
                        "speedup_at_low": None if bar is None else round(bar.at_low, 3),
                        "speedup_at_high": None if bar is None else round(bar.at_high, 3)})
    return pd.DataFrame(out)


def parts_table(result: WhatIf) -> pd.DataFrame:
    """The step's parts (ms a GPU) per concurrency, baseline and speculative, with labels."""
    out = []
    for r in result.rows:
        for name, part in r.parts.items():
            out.append({"concurrency": r.concurrency, "part": name, "label": part["label"],
                        "baseline_ms": part["baseline_ms"], "spec_ms": part["spec_ms"],
                        "extra_ms": round(part["spec_ms"] - part["baseline_ms"], 4)})
    return pd.DataFrame(out)


def render(result: WhatIf, *, long: bool = False) -> str:
    """The what-if as the CLI prints it."""
    scn = result.scenario
    lines = [scn.name, f"  regime: {regime(result)}"]
    if scn.source:
        lines.append(f"  source: {scn.source}")
    lines.append("")
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_colwidth", 90):
        table = rows_table(result).drop(columns=["nearest_flip"])
        lines.append(table.to_string(index=False))
        lines.append("")
        lines.append("What would flip each verdict (every other input at its middle):")
        lines += [f"- {r.sentence}" for r in result.rows]
        lines.append("")
        wide = parts_table(result).pivot_table(index="part", columns="concurrency", values="extra_ms", sort=False)
        lines.append("What verification adds to the step, ms a GPU (speculative minus baseline), by part and "
                     "concurrency:")
        lines.append(wide.round(2).to_string())
        if long:
            lines.append("")
            lines.append(parts_table(result).round(3).to_string(index=False))
            lines.append("")
            lines.append(sensitivity_table(result).to_string(index=False))
    lines.append("")
    lines.append("Parts (label: where the figure comes from):")
    first = result.rows[0]
    for name, part in first.parts.items():
        lines.append(f"  {name:<14} {part['label']:<9} {part['source']}")
    lines.append(f"  {'acceptance':<14} {first.acceptance['label']:<9} {first.acceptance['source']}")
    lines.append("")
    lines.append("Inputs drawn for the 90 % interval (range; middle of the kept draws):")
    for item in result.deployment.inputs:
        mid = result.mids[item.name]
        lines.append(f"  {item.name:<22} {item.label:<9} {item.show(item.low)} .. {item.show(item.high)}; "
                     f"{item.show(mid)}")
    lines.append(f"  ({result.kept} of {result.drawn} draws kept)")
    if result.notes:
        lines.append("")
        lines.append("Notes:")
        lines += [f"- {n}" for n in result.notes]
    return "\n".join(lines)
