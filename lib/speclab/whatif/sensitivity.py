"""Where each concurrency's verdict flips: per borrowed or assumed input, the value at which the
predicted speedup crosses 1 with every other input held at its middle, and the tornado's ends
(the speedup at each end of the input's range).

Speculative mode's own cost and the acceptance length have closed forms
(``mode* = AL T1 - T_spec without it``, ``AL* = T_spec / T1``); the others are found on a grid
over the input's search range, the anchored fixed cost refitted at every grid point (so a
slower all-reduce in the baseline is taken back from the fixed cost, as the published baseline
demands).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np

from speclab.whatif.step import Deployment, Input, step_times

__all__ = ["Flip", "TornadoBar", "flips", "mode_range_ms", "sentence", "tornado"]

GRID = 241


@dataclass(frozen=True)
class Flip:
    """The value of one input at which one concurrency's verdict flips (``value`` None: none in
    the search range). ``direction``: the flipped verdict needs the input ``below`` or
    ``above`` the value. ``distance``: how far outside its range, in range widths (0 inside)."""

    input: str
    what: str
    unit: str
    label: str
    value: float | None
    direction: Literal["below", "above"] | None
    low: float
    high: float
    distance: float
    text: str


@dataclass(frozen=True)
class TornadoBar:
    input: str
    what: str
    label: str
    at_low: float
    at_high: float
    low: float
    high: float
    unit: str

    @property
    def swing(self) -> float:
        return abs(self.at_high - self.at_low)


def mode_range_ms(dep: Deployment, mids: Mapping[str, float], concurrency: int) -> tuple[float, float]:
    """Speculative mode's own cost at the table's low and high ends (ms a step) at this concurrency."""
    lo = step_times(dep, {**mids, "mode_share": 0.0}, concurrency)
    hi = step_times(dep, {**mids, "mode_share": 1.0}, concurrency)
    return float(lo.spec_parts["mode"]), float(hi.spec_parts["mode"])


def _grid(item: Input) -> np.ndarray:
    lo, hi = item.search
    if lo > 0 and hi / lo > 20:
        return np.geomspace(lo, hi, GRID)
    return np.linspace(lo, hi, GRID)


def _distance(value: float, low: float, high: float) -> float:
    if low <= value <= high:
        return 0.0
    width = high - low if high > low else max(abs(low), 1e-9)
    return (low - value) / width if value < low else (value - high) / width


def _phrase(item_what: str, unit: str, direction: str, value: float, fmt: str) -> str:
    shown = fmt.format(value) + (f" {unit}" if unit else "")
    if direction == "below":
        return f"{item_what} is below {shown}"
    return f"{item_what} is above {shown}"


def flips(dep: Deployment, mids: Mapping[str, float], concurrency: int,
          swings: Mapping[str, float] | None = None) -> list[Flip]:
    """Every input's flip value at one concurrency: those inside their range first (the widest
    tornado bar first, ``swings``), then the others nearest their range first."""
    point = step_times(dep, mids, concurrency)
    s0 = float(point.speedup)
    wins = s0 >= 1.0
    out: list[Flip] = []
    for item in dep.inputs:
        if item.name == "mode_share":
            mode_lo, mode_hi = mode_range_ms(dep, mids, concurrency)
            without = float(point.spec_ms) - float(point.spec_parts["mode"])
            value = float(mids["acceptance_length"]) * float(point.baseline_ms) - without
            direction: Literal["below", "above"] | None = "above" if wins else "below"
            if value < 0:
                value_opt: float | None = None
                direction = None
            else:
                value_opt = value
            out.append(_flip(item.name, "speculative mode's own cost", "ms a step", item.label, value_opt, direction,
                             mode_lo, mode_hi, "{:.1f}", wins))
            continue
        if item.name == "acceptance_length":
            value = float(point.spec_ms) / float(point.baseline_ms)
            ok = 1.0 <= value <= dep.k + 1 or dep.scenario.option.tree
            out.append(_flip(item.name, item.what, item.unit, item.label, value if ok else None,
                             ("below" if wins else "above") if ok else None, item.low, item.high, item.fmt, wins))
            continue
        grid = _grid(item)
        values = {**mids, item.name: grid}
        s = np.asarray(step_times(dep, values, concurrency).speedup, float) - 1.0
        crossings = np.nonzero(np.sign(s[:-1]) * np.sign(s[1:]) < 0)[0]
        if crossings.size == 0:
            out.append(_flip(item.name, item.what, item.unit, item.label, None, None, item.low, item.high, item.fmt,
                             wins))
            continue
        centre = item.mid
        best = min(crossings, key=lambda i: abs(grid[i] - centre))
        x0, x1, y0, y1 = grid[best], grid[best + 1], s[best], s[best + 1]
        value = float(x0 - y0 * (x1 - x0) / (y1 - y0))
        rising = y1 > y0
        # a win flips to a loss on the side where the speedup falls, and a loss to a win where it rises
        direction = ("below" if rising else "above") if wins else ("above" if rising else "below")
        out.append(_flip(item.name, item.what, item.unit, item.label, value, direction, item.low, item.high, item.fmt,
                         wins))
    swing = swings or {}
    return sorted(out, key=lambda f: (f.value is None, f.distance, -swing.get(f.input, 0.0)))


def _flip(name: str, what: str, unit: str, label: str, value: float | None, direction: Literal["below", "above"] | None,
          low: float, high: float, fmt: str, wins: bool) -> Flip:
    if value is None or direction is None:
        return Flip(name, what, unit, label, None, None, low, high, math.inf, f"no value of {what} in reach flips it")
    return Flip(name, what, unit, label, value, direction, low, high, _distance(value, low, high),
                _phrase(what, unit, direction, value, fmt))


def tornado(dep: Deployment, mids: Mapping[str, float], concurrency: int) -> list[TornadoBar]:
    """The speedup at each end of every input's range, the others at their middle; widest first."""
    bars = []
    for item in dep.inputs:
        lo = float(step_times(dep, {**mids, item.name: item.low}, concurrency).speedup)
        hi = float(step_times(dep, {**mids, item.name: item.high}, concurrency).speedup)
        what = "speculative mode's own cost" if item.name == "mode_share" else item.what
        bars.append(TornadoBar(item.name, what, item.label, lo, hi, item.low, item.high, item.unit))
    return sorted(bars, key=lambda b: -b.swing)


def sentence(method: str, concurrency: int, speedup: float, low: float, high: float, verdict: str,
             items: list[Flip], most: int = 3) -> str:
    """``n-gram loses at c=32 (0.93x, 90 % 0.88-0.99); it would win only if ...``: the flips
    nearest their ranges, and which input decides."""
    wins = speedup >= 1.0
    head = (f"{method} {'wins' if wins else 'loses'} at c={concurrency} ({speedup:.2f}x, 90 % {low:.2f}-{high:.2f}"
            + (", unclear" if verdict == "unclear" else "") + ")")
    reach = [f for f in items if f.value is not None][:most]
    if not reach:
        return head + "; no input in reach flips it."
    body = ", or ".join(f.text for f in reach)
    first = reach[0]
    if first.distance == 0:
        decide = f" Decided by {first.what}: the flip lies inside its range ({_span(first)}, {first.label})."
    else:
        decide = f" No input flips it inside its range; nearest: {first.what} ({_span(first)}, {first.label})."
    return f"{head}; it would {'lose' if wins else 'win'} only if {body}.{decide}"


def _span(flip: Flip) -> str:
    if flip.input in {"hbm_efficiency", "compute_efficiency"}:
        return f"{flip.low:.0%}-{flip.high:.0%}"
    return f"{flip.low:.3g}-{flip.high:.3g}" + (f" {flip.unit}" if flip.unit else "")
