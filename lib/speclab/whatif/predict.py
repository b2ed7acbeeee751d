"""The what-if's prediction: a speedup per concurrency with a 90 % interval, a verdict, its parts
and where it flips.

The interval comes from draws of every borrowed and assumed input, uniform over its range
(:mod:`speclab.whatif.step`). Where the scenario gives a published baseline, the draws are
conditioned on it: a draw whose parts alone exceed a published baseline step contradicts the
deployment and is dropped (said in the notes, with how many were dropped), and the fixed cost
of the kept draws is fitted to the published step. The point prediction holds each input at the
median of the kept draws; the interval is their 5th-95th percentile, widened to hold the
prediction at each of two disagreeing sources (the H200 harnesses) where the baseline does not
rule that source out. The verdict is ``win`` or ``lose`` where the interval lies on one side of
1, ``unclear`` where it holds 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from speclab.options import INSTANCE_SD
from speclab.predict.modecost import ModeCost
from speclab.whatif import sensitivity
from speclab.whatif.scenario import Scenario
from speclab.whatif.step import Deployment, mode_at, prepare, step_times

__all__ = ["DRAWS", "PART_LABELS", "RESTART_SD", "Row", "WhatIf", "predict", "verdict_of"]

DRAWS = 1000
MIN_KEPT = 50
# One server instance's speed about its arm's mean (log sd): speclab's A/A restarts, 3.5 %
# (speclab.options.INSTANCE_SD, borrowed for servers speclab did not measure). A speedup compares
# two instances (the baseline measured and the restart), so its log carries sqrt(2) of that.
RESTART_SD = math.sqrt(2.0) * INSTANCE_SD
RESTART_DRAWS = 8  # instance-noise draws per input draw (smooths the percentiles where few draws are kept)
GROUP_CORRELATION = 0.5  # assumed: how much of an input's variation its group shares

PART_LABELS = {
    "weights": "borrowed", "experts": "borrowed", "kv": "borrowed", "compute": "borrowed",
    "communication": "borrowed", "drafter": "assumed",
}

METHOD_NAMES = {"ngram": "n-gram", "suffix": "suffix", "eagle": "EAGLE", "eagle3": "EAGLE-3", "mtp": "MTP",
                "dspark": "DSpark", "dflash": "DFlash", "draft_model": "the draft model", "ngram_gpu": "GPU n-gram"}


def verdict_of(low: float, high: float) -> str:
    if low > 1.0:
        return "win"
    if high < 1.0:
        return "lose"
    return "unclear"


@dataclass
class Row:
    """One concurrency's prediction (``to_json`` gives the schema's row)."""

    concurrency: int
    speedup: float
    low: float
    high: float
    verdict: str
    baseline_ms: float
    spec_ms: float
    baseline_from: str  # published | interpolated | modelled
    parts: dict[str, dict[str, Any]]
    acceptance: dict[str, Any]
    flips: list[sensitivity.Flip]
    tornado: list[sensitivity.TornadoBar]
    sentence: str

    def to_json(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency, "speedup": round(self.speedup, 4), "low": round(self.low, 4),
            "high": round(self.high, 4), "verdict": self.verdict, "parts": self.parts,
            "acceptance": self.acceptance, "baseline_step_ms": round(self.baseline_ms, 3),
            "spec_step_ms": round(self.spec_ms, 3), "baseline_from": self.baseline_from,
            "flips": [{"input": f.input, "value": None if f.value is None else round(f.value, 4),
                       "direction": f.direction, "low": f.low, "high": f.high, "label": f.label, "text": f.text}
                      for f in self.flips],
            "sentence": self.sentence,
        }


@dataclass
class WhatIf:
    """A scenario's prediction: rows per concurrency, the inputs and what they rest on."""

    scenario: Scenario
    deployment: Deployment
    rows: list[Row]
    mids: dict[str, float]
    kept: int
    drawn: int
    notes: list[str] = field(default_factory=list)

    @property
    def method_name(self) -> str:
        return METHOD_NAMES.get(self.deployment.method, self.deployment.method)

    def row(self, concurrency: int) -> Row:
        return next(r for r in self.rows if r.concurrency == concurrency)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.scenario.name, "rows": [r.to_json() for r in self.rows],
                "inputs": [{"name": i.name, "low": i.low, "high": i.high, "middle": round(self.mids[i.name], 4),
                            "unit": i.unit, "label": i.label, "source": i.source} for i in self.deployment.inputs],
                "notes": self.notes, "draws": {"drawn": self.drawn, "kept": self.kept}}


def _draws(dep: Deployment, n: int, seed: int) -> dict[str, np.ndarray]:
    """Uniform draws over each input's range; inputs of one group share half their variation
    (a Gaussian copula with correlation :data:`GROUP_CORRELATION`, each oriented so that a high
    draw slows the step): an engine that pays little for one part of its mode tends to pay
    little for the others."""
    from scipy.special import ndtr

    rng = np.random.default_rng(seed)
    shared = {g: rng.standard_normal(n) for g in sorted({i.group for i in dep.inputs if i.group})}
    out = {}
    for item in dep.inputs:
        z = rng.standard_normal(n)
        if item.group:
            z = np.sqrt(GROUP_CORRELATION) * shared[item.group] + np.sqrt(1 - GROUP_CORRELATION) * z
        u = ndtr(z)
        if item.worse == "low":
            u = 1.0 - u
        out[item.name] = item.low + u * (item.high - item.low)
    return out


def _mode_source(mode: ModeCost) -> tuple[str, str]:
    modes = mode.parts
    label = "assumed" if any(p.label == "assumed" for p in modes) else ("borrowed" if modes else "assumed")
    return label, "; ".join(f"{p.name} ({p.label}): {p.source}" for p in modes) or "none"


def _part_sources(dep: Deployment, mids: dict[str, float]) -> dict[str, tuple[str, str]]:
    scn = dep.scenario
    fixed = (("fitted", "the published baseline step minus the other parts" +
              (" (interpolated in concurrency between the published points)" if len(dep.anchors) > 1 else ""))
             if dep.anchors else ("assumed", dep.input("fixed_ms").source))
    out = {
        "weights": ("borrowed", f"non-expert weights from model.config; {dep.input('hbm_efficiency').source}"),
        "experts": ("borrowed", "distinct experts E(1-(1-K/E)^t) a layer from model.config; "
                                + (dep.input("moe_expert_us").source if dep.arch.is_moe else "no routed experts")),
        "kv": ("fitted", "cache bytes from model.config and the workload; " + dep.input("kv_draft_factor").source),
        "compute": ("borrowed", f"{dep.gpu.name} dense peak ({dep.gpu.source}); {dep.input('compute_efficiency').source}"),
        "communication": ("borrowed", dep.input("allreduce_bus_gb_s").source if dep.link else "one GPU: none"),
        "fixed": fixed,
        "drafter": ("assumed", ("; ".join(n for n in dep.notes if n.startswith(("MTP", "EAGLE", "dspark", "dflash")))
                                + "; " + dep.input("draft_pass_ms").source) if dep.drafter else "no drafter pass"),
        "mode": _mode_source(dep.mode),
    }
    if scn.parallel.attention_data_parallel > 1 and dep.link:
        out["communication"] = ("borrowed", "two all-to-alls a MoE layer (DP attention + expert parallel), "
                                            + dep.input("allreduce_bus_gb_s").source)
    return out


def predict(scenario: Scenario, *, draws: int = DRAWS, seed: int = 0, strict_version: bool = False,
            with_sensitivity: bool = True) -> WhatIf:
    """Predict ``scenario``'s speedup per concurrency (raises :class:`~speclab.whatif.step.Refusal`
    with one sentence where it cannot)."""
    dep = prepare(scenario, strict_version=strict_version)
    sample = _draws(dep, draws, seed)
    first = scenario.concurrencies[0]
    consistent = np.asarray(step_times(dep, sample, first).consistent, bool)
    notes = list(dep.notes)
    kept_mask = consistent if consistent.sum() >= MIN_KEPT else np.ones(draws, bool)
    if dep.anchors:
        dropped = int(draws - consistent.sum())
        if consistent.sum() < MIN_KEPT:
            notes.append(f"The parts alone exceed the published baseline step in {dropped} of {draws} draws: the model "
                         "over-prices this deployment, all draws kept and the fixed cost clipped at 0.")
        elif dropped:
            notes.append(f"{dropped} of {draws} draws price the baseline above its published step and are dropped "
                         "(the published baseline rules those input values out for this deployment).")
        ruled = [name for name, values in _sources(dep).items()
                 if not bool(np.all(step_times(dep, {**_median(sample, kept_mask), **values}, first).consistent))]
        if ruled:
            notes.append(f"{' and '.join(ruled)}: its figures price the published baseline above its step, so the "
                         "interval does not span it here.")
    # the middle: the kept draws' median where the published baseline can rule on an input, the
    # range's centre (or the figure given) where it cannot
    medians = _median(sample, kept_mask)
    mids = {i.name: (i.centre if i.spec_only else medians[i.name]) for i in dep.inputs}
    kept = {k: v[kept_mask] for k, v in sample.items()}
    # a restart is one server instance, and so was the baseline measured: the speedup a restart shows
    # carries both instances' spread (RESTART_DRAWS noise draws per input draw, the same at every
    # concurrency: an instance is as fast or slow at every load)
    restart = np.exp(np.random.default_rng(seed + 1).standard_normal((int(kept_mask.sum()), RESTART_DRAWS))
                     * RESTART_SD)
    notes.append(f"The interval holds two server instances' spread ({RESTART_SD:.1%} on the speedup's log, sqrt(2) x "
                 f"{INSTANCE_SD:.1%} an instance, borrowed: speclab's A/A restart spread, speclab.options.INSTANCE_SD): "
                 "the baseline measured and the restart are one instance each.")
    sources = _part_sources(dep, mids)
    al_item = dep.input("acceptance_length")
    rows = []
    for c in scenario.concurrencies:
        point = step_times(dep, mids, c)
        spread = (np.asarray(step_times(dep, kept, c).speedup, float)[:, None] * restart).ravel()
        s = float(point.speedup)
        low, high = (float(x) for x in np.quantile(spread, [0.05, 0.95]))
        for values in _sources(dep).values():
            alt = step_times(dep, {**mids, **values}, c)
            if bool(np.all(alt.consistent)) or not dep.anchors:
                low, high = min(low, float(alt.speedup)), max(high, float(alt.speedup))
        low, high = min(low, s), max(high, s)
        parts = {}
        row_sources = {**sources, "mode": _mode_source(mode_at(dep, c))}
        for name in list(point.baseline_parts) + ["drafter", "mode"]:
            label, source = row_sources[name]
            parts[name] = {"baseline_ms": round(float(point.baseline_parts.get(name, 0.0)), 4),
                           "spec_ms": round(float(point.spec_parts.get(name, 0.0)), 4), "label": label,
                           "source": source}
        acceptance = {"tokens_per_step": round(float(mids["acceptance_length"]), 4), "low": al_item.low,
                      "high": al_item.high, "label": scenario.acceptance_label, "source": al_item.source}
        tor = sensitivity.tornado(dep, mids, c) if with_sensitivity else []
        fl = sensitivity.flips(dep, mids, c, {b.input: b.swing for b in tor}) if with_sensitivity else []
        verdict = verdict_of(low, high)
        method = METHOD_NAMES.get(dep.method, dep.method)
        text = sensitivity.sentence(method, c, s, low, high, verdict, fl) if with_sensitivity else ""
        base_from = "published" if c in dep.anchors else ("interpolated" if dep.anchors else "modelled")
        rows.append(Row(c, s, low, high, verdict, float(point.baseline_ms), float(point.spec_ms), base_from, parts,
                        acceptance, fl, tor, text))
    return WhatIf(scenario, dep, rows, mids, int(kept_mask.sum()), draws, notes)


def _sources(dep: Deployment) -> dict[str, dict[str, float]]:
    """Each named source's values across the inputs it sets (a harness sets two)."""
    out: dict[str, dict[str, float]] = {}
    for item in dep.inputs:
        for name, value in item.sources.items():
            out.setdefault(name, {})[item.name] = value
    # a source whose value lies outside an input's range has been ruled out (the range says why)
    return {name: values for name, values in out.items()
            if all(dep.input(k).low <= v <= dep.input(k).high for k, v in values.items())}


def _median(sample: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, float]:
    return {k: float(np.median(v[mask])) for k, v in sample.items()}
