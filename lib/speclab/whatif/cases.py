"""Published speculative-decoding results as the what-if's benchmark (``make bench-whatif``).

Each case (``lib/speclab/data/whatif/published-cases.yaml``) is a scenario plus what was
published (``published.speedup_by_concurrency``, optionally ``speedup_bounds`` such as
``"< 1.0"``). Each cell (case x concurrency) gets the predicted speedup and interval, the
published speedup, the error, whether the interval covers it and whether the verdicts agree.

A cell is **scored** unless the case cannot be predicted (its one-sentence reason is printed),
the published speedup exceeds the acceptance length (speculation alone cannot do that: the
source measures something else as well, and the benchmark says so instead of fitting it), or
its concurrency is inferred rather than printed (``published.inferred_concurrencies``). A cell
is **confidently wrong** where the prediction's interval excludes 1 on one side and the
published speedup lies on the other; the headline counts those whose published effect lies
beyond +-5 %.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from speclab.errors import SpeclabError
from speclab.whatif.predict import DRAWS, predict
from speclab.whatif.scenario import load_scenarios, scenario_from_dict
from speclab.whatif.step import Refusal

__all__ = ["CASES_FILE", "Cell", "CaseResult", "EFFECT_BAND", "cells_table", "report", "run_cases", "score",
           "score_case"]

CASES_FILE = Path(__file__).parents[1] / "data" / "whatif" / "published-cases.yaml"
EFFECT_BAND = 0.05


@dataclass
class Cell:
    case: str
    concurrency: int
    published: float | None
    bound: str | None
    predicted: float | None
    low: float | None
    high: float | None
    verdict: str | None
    acceptance: str
    in_sample: bool = False
    excluded: str | None = None  # why the cell is not scored

    @property
    def scored(self) -> bool:
        return self.excluded is None and self.predicted is not None and self.published is not None

    @property
    def covered(self) -> bool | None:
        if self.published is None or self.low is None or self.high is None:
            return None
        return self.low <= self.published <= self.high

    @property
    def error(self) -> float | None:
        if self.published is None or self.predicted is None:
            return None
        return self.predicted / self.published - 1.0

    @property
    def width(self) -> float | None:
        if self.predicted is None or self.low is None or self.high is None:
            return None
        return (self.high - self.low) / self.predicted

    @property
    def published_verdict(self) -> str | None:
        if self.published is not None:
            return "win" if self.published > 1.0 else "lose"
        if self.bound:
            match = re.match(r"\s*([<>])=?\s*([0-9.]+)", self.bound)
            if match and float(match.group(2)) <= 1.0 and match.group(1) == "<":
                return "lose"
            if match and float(match.group(2)) >= 1.0 and match.group(1) == ">":
                return "win"
        return None

    @property
    def beyond_band(self) -> bool:
        if self.published is not None:
            return abs(self.published - 1.0) > EFFECT_BAND
        return self.published_verdict is not None

    @property
    def agrees(self) -> bool | None:
        truth = self.published_verdict
        if truth is None or self.verdict is None:
            return None
        if self.verdict == "unclear":
            return None
        return self.verdict == truth

    @property
    def confidently_wrong(self) -> bool:
        return self.agrees is False


@dataclass
class CaseResult:
    name: str
    source: str
    refusal: str | None
    cells: list[Cell] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _acceptance_text(data: Mapping[str, Any]) -> str:
    text = str((data.get("option") or {}).get("acceptance_source") or "not given")
    return text.split(":")[0].strip() if ":" in text else text


def score_case(data: Mapping[str, Any], *, draws: int = DRAWS, strict_version: bool = False) -> CaseResult:
    """One published case predicted and compared, never raising on the case's content."""
    name = str(data.get("name", "unnamed case"))
    source = str(data.get("source", ""))
    published = data.get("published") or {}
    speedups = {int(k): (None if v is None else float(v))
                for k, v in (published.get("speedup_by_concurrency") or {}).items()}
    bounds = {int(k): str(v) for k, v in (published.get("speedup_bounds") or {}).items()}
    inferred = {int(c) for c in published.get("inferred_concurrencies") or []}
    in_sample = bool(published.get("in_sample"))
    try:
        scenario = scenario_from_dict(dict(data), where=name)
        result = predict(scenario, draws=draws, strict_version=strict_version, with_sensitivity=False)
    except Refusal as exc:
        return CaseResult(name, source, exc.message)
    except SpeclabError as exc:
        return CaseResult(name, source, exc.message)
    al_text = scenario.acceptance_label
    al = scenario.acceptance_length()
    out = CaseResult(name, source, None, notes=list(result.notes))
    for row in result.rows:
        c = row.concurrency
        pub = speedups.get(c)
        cell = Cell(name, c, pub, bounds.get(c), row.speedup, row.low, row.high, row.verdict, al_text, in_sample)
        if pub is None and c not in bounds:
            cell.excluded = "no published speedup at this concurrency"
        elif c in inferred:
            cell.excluded = "the published value's concurrency is inferred, not printed"
        elif pub is not None and al is not None and pub > al:
            cell.excluded = (f"the published {pub:.2f}x exceeds the {al_text} acceptance length {al:.2f}: speculation "
                             "alone cannot do that, so the source measures something else as well")
        out.cells.append(cell)
    return out


def run_cases(path: str | Path | None = None, *, draws: int = DRAWS, strict_version: bool = False) -> list[CaseResult]:
    """Every case of the file (default: the shipped development set), predicted and compared."""
    return [score_case(d, draws=draws, strict_version=strict_version) for d in load_scenarios(path or CASES_FILE)]


def cells_table(results: list[CaseResult]) -> pd.DataFrame:
    rows = []
    for res in results:
        for cell in res.cells:
            rows.append({"case": res.name, "concurrency": cell.concurrency,
                         "predicted": cell.predicted, "low": cell.low, "high": cell.high, "verdict": cell.verdict,
                         "published": cell.published if cell.published is not None else cell.bound,
                         "error_pct": None if cell.error is None else round(100 * cell.error, 1),
                         "covered": cell.covered, "agrees": cell.agrees, "acceptance": cell.acceptance,
                         "scored": cell.scored, "excluded": cell.excluded})
    return pd.DataFrame(rows)


def score(results: list[CaseResult], *, include_in_sample: bool = True) -> dict[str, Any]:
    """Coverage, confidently-wrong counts and interval widths over the scored cells."""
    cells = [c for r in results for c in r.cells if c.excluded is None and (include_in_sample or not c.in_sample)]
    valued = [c for c in cells if c.scored]
    verdicts = [c for c in cells if c.published_verdict is not None and c.predicted is not None]
    beyond = [c for c in verdicts if c.beyond_band]
    widths = [c.width for c in valued if c.width is not None]
    errors = [abs(c.error) for c in valued if c.error is not None]
    return {
        "cases": len(results), "predicted_cases": sum(r.refusal is None for r in results),
        "refused_cases": sum(r.refusal is not None for r in results),
        "cells_scored": len(valued), "covered": sum(bool(c.covered) for c in valued),
        "coverage": (sum(bool(c.covered) for c in valued) / len(valued)) if valued else float("nan"),
        "verdict_cells": len(verdicts), "agree": sum(c.agrees is True for c in verdicts),
        "unclear": sum(c.verdict == "unclear" for c in verdicts),
        "confidently_wrong": sum(c.confidently_wrong for c in verdicts),
        "confidently_wrong_beyond_5pct": sum(c.confidently_wrong for c in beyond),
        "cells_beyond_5pct": len(beyond),
        "median_width": float(np.median(widths)) if widths else float("nan"),
        "median_abs_error": float(np.median(errors)) if errors else float("nan"),
        "excluded": [(c.case, c.concurrency, c.excluded) for r in results for c in r.cells
                     if c.excluded and not c.excluded.startswith("no published")],
    }


def report(results: list[CaseResult], *, title: str = "") -> str:
    """The benchmark's printed output: per case and concurrency, then the scores."""
    lines = [title] if title else []
    for res in results:
        lines.append("")
        lines.append(res.name)
        lines.append(f"  source: {res.source}")
        if res.refusal:
            lines.append(f"  not predicted: {res.refusal}")
            continue
        for cell in res.cells:
            pub = f"{cell.published:.3f}" if cell.published is not None else (cell.bound or "-")
            err = f"{100 * cell.error:+.1f} %" if cell.error is not None else "-"
            cov = {True: "covered", False: "MISSED", None: "-"}[cell.covered]
            agree = {True: "agrees", False: "CONFIDENTLY WRONG", None: "no call" if cell.verdict == "unclear" else "-"}[
                cell.agrees]
            lines.append(f"  c={cell.concurrency:<6} predicted {cell.predicted:.3f} [{cell.low:.3f}, {cell.high:.3f}] "
                         f"{cell.verdict:<8} published {pub:<8} error {err:<9} {cov:<8} {agree:<18} "
                         f"acceptance {cell.acceptance}" + (" (in-sample)" if cell.in_sample else ""))
            if cell.excluded and not cell.excluded.startswith("no published"):
                lines.append(f"           not scored: {cell.excluded}")
        for note in res.notes:
            if "draws" in note or "rules" in note or "unknown" in note or "over-prices" in note:
                lines.append(f"  note: {note}")
    for label, include in (("all scored cells", True), ("without in-sample cells", False)):
        s = score(results, include_in_sample=include)
        lines.append("")
        lines.append(f"Scores, {label}:")
        lines.append(f"  cases {s['cases']}: predicted {s['predicted_cases']}, refused {s['refused_cases']}")
        lines.append(f"  coverage of the 90 % interval: {s['covered']} of {s['cells_scored']} cells "
                     f"({s['coverage']:.0%}); median interval width {s['median_width']:.0%} of the prediction; "
                     f"median |error| {s['median_abs_error']:.0%}")
        lines.append(f"  verdicts: {s['agree']} agree, {s['unclear']} unclear, {s['confidently_wrong']} confidently "
                     f"wrong of {s['verdict_cells']} cells; confidently wrong where the published effect lies beyond "
                     f"+-5 %: {s['confidently_wrong_beyond_5pct']} of {s['cells_beyond_5pct']}")
    refused = [r for r in results if r.refusal]
    if refused:
        lines.append("")
        lines.append("Refused (excluded from the scores):")
        lines += [f"  {r.name}: {r.refusal}" for r in refused]
    excluded = score(results)["excluded"]
    if excluded:
        lines.append("")
        lines.append("Cells reported but not scored:")
        lines += [f"  {case}, c={c}: {why}" for case, c, why in excluded]
    return "\n".join(lines)
