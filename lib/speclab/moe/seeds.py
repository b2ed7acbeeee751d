"""The seeds' case: Kimi-K2.5 on 8 PCIe GPUs, a predicted n-gram speedup in parts.

The seeds measured a decode profile (all-reduce 51.5 %, attention 15.3 %, other GEMMs 13.4 %,
MoE GEMMs 11.1 %), two baseline points (82.5 tok/s at concurrency 1, 1,536 at 128) and n-gram
9-26 % slower. Their step is rebuilt here part by part (:class:`SeedStepModel`): each part's
time at the profile's concurrency is its share of the measured step, and each grows by what it
is (:mod:`speclab.predict.stepparts`):

* communication: two all-reduces a layer, latency-bound at decode message sizes; past them the
  published NCCL figures for 8 PCIe GPUs price the extra bytes (*borrowed*);
* attention, other GEMMs, other: the forms fitted to speclab's H200 step curves of one TP-8 rank
  of Kimi-K2.5 (``benchmarks/gpu_step.py``; *fitted*), at an assumed context;
* MoE: the experts a step loads (:func:`speclab.moe.models.loaded_per_step`, under a routing
  model and an optional budget) through a measured cost line, either the TP-8 rank's (1/8 slices
  of 384 experts) or the full-expert layer's (``moe_layer_bench``; both *fitted*, H200);
* the speculative mode's own overhead per step, a range no probe sees (*borrowed*).

``scenario.scaling = "linear_in_tokens"`` keeps the old assumption as a named option: every
non-MoE part grows with the step's tokens like the baseline grows with sequences.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator

from speclab.errors import SpeclabError
from speclab.moe.models import RoutingModel, Strategy, VerifyCurve, loaded_per_step, parse_routing
from speclab.predict.costmodel import expected_tokens_per_step, interp_linear, predict_speedup
from speclab.predict.stepparts import (
    SPEC_OVERHEAD,
    AllReduceForm,
    PartForms,
    PartScaling,
    PartsStepTime,
    decompose_speedup,
    driving_part,
    fit_part_forms,
    load_gpu_step,
)

__all__ = [
    "RANK_SHAPE",
    "SeedScenario",
    "MoECost",
    "SeedStepModel",
    "SeedsExplanation",
    "explain_seeds",
    "full_expert_moe",
    "predict_budget_speedups",
    "rank_forms",
    "rank_moe",
    "scenario_acceptance",
]

RANK_SHAPE = "kimi-k2.5-tp8-rank"

# The speculative mode's own cost per step, which no probe of the baseline sees. Low end: the
# fitted per-step overhead of a speculative step in the SpecDecode-Bench simulator (Llama-3.1-8B,
# H100: proposer, rejection sampler, bookkeeping), 1.21 ms. High end: that plus what CUDA graphs
# lose when verify batches fall from FULL_AND_PIECEWISE to PIECEWISE: -14 % single-stream tok/s
# (59.6 -> 50.0, Qwen3.5-122B MTP k=2; vllm-project/vllm#49548, #48494), i.e. +19 % step time,
# 2.3 ms of the seeds' 12.1 ms single-stream step. vLLM also turns async scheduling off for the
# CPU n-gram proposer (RFC vllm-project/vllm#51788, PR #52097): its cost depends on the host and
# is not priced separately.
SPEC_OVERHEAD_SOURCE = ("1.2 ms: SpecDecode-Bench's fitted per-step overhead (Llama-3.1-8B, H100); 3.5 ms: plus "
                        "PIECEWISE instead of full CUDA graphs, +19 % step time (vllm#49548, #48494) of a 12.1 ms step; "
                        "async scheduling lost with CPU n-gram (vllm RFC #51788) not priced")


class SeedScenario(BaseModel):
    """The motivating deployment (Kimi-K2.5, 8 PCIe GPUs) as measured by the seeds' team, with
    every figure the seeds did not give named as such.

    Measured by the seeds: the decode profile's shares, the baseline tok/s points and the n-gram
    loss. Assumed here: the concurrency the profile was taken at, the context each sequence
    decodes at, and n-gram's acceptance (``alpha``, when no baseline is replayed). Borrowed: the
    all-reduce's bus bandwidth past the latency-bound sizes and the speculative mode's own
    overhead per step. :mod:`speclab.moe.seeds` turns it into a step model in parts
    (docs/moe.md section 5).
    """

    model_config = ConfigDict(extra="forbid")

    name: str = "Kimi-K2.5 on 8 PCIe GPUs (TP 8)"
    decode_budget: dict[str, float] = Field(
        default_factory=lambda: {"all_reduce": 0.515, "attention": 0.153, "other_gemm": 0.134, "moe_gemm": 0.111},
        description="share of decode step time per component (profile); the rest is 'other'",
    )
    baseline_tok_s: dict[int, float] = Field(
        default_factory=lambda: {1: 82.5, 128: 1536.0}, description="concurrency -> measured baseline tok/s"
    )
    profile_concurrency: int = Field(
        1, ge=1, description="concurrency the decode profile was taken at (the seeds did not say: assumed)")
    context_tokens: int = Field(
        2048, ge=1, description="context each sequence attends to while decoding (assumed: a thinking-on answer)")
    hidden_size: int = Field(7168, ge=1, description="all-reduce message per token = hidden x 2 bytes")
    layers: int = Field(61, ge=1, description="transformer layers (two all-reduces each under TP)")
    tensor_parallel: int = Field(8, ge=2, description="GPUs in the all-reduce")
    allreduce_bus_gb_s: float = Field(
        22.2, gt=0, description="all-reduce bus bandwidth past the latency-bound sizes (borrowed: NCCL, 8 PCIe GPUs)")
    spec_mode_overhead_ms: tuple[float, float] = Field(
        (1.2, 3.5), description="[low, high] ms per speculative step that no probe sees (borrowed; docs/moe.md)")
    scaling: Literal["parts", "linear_in_tokens"] = Field(
        "parts", description="parts: each part by what it is; linear_in_tokens: the old assumption, every "
                             "non-MoE part growing with the step's tokens as if each draft token were a new sequence")
    unexplained_scaling: Literal["sequences", "tokens", "off"] = Field(
        "sequences", description="the measured baseline step minus the parts: grows with sequences (per-request "
                                 "work, longer contexts; default), with the step's tokens, or left out (assumed)")
    routed_experts: int = 384
    experts_per_token: int = 8
    num_speculative_tokens: int = Field(4, ge=1, le=16)
    alpha: float = Field(0.5, ge=0, le=1, description="per-token n-gram acceptance when a draft exists (assumed)")
    draft_fraction: float = Field(1.0, gt=0, le=1, description="share of steps where n-gram finds a match")
    load_time_s: float = Field(1800.0, gt=0, description="a restart (~30 min)")
    measured_ngram_change: tuple[float, float] = Field(
        (-0.26, -0.09), description="what the team measured: n-gram 9-26 % slower"
    )
    concurrency: list[int] = Field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128])

    @field_validator("decode_budget")
    @classmethod
    def _shares(cls, value: dict[str, float]) -> dict[str, float]:
        missing = {"all_reduce", "attention", "other_gemm", "moe_gemm"} - set(value)
        if missing:
            raise ValueError(f"decode_budget needs shares for {', '.join(sorted(missing))}")
        if any(v < 0 for v in value.values()) or sum(value.values()) > 1.0 + 1e-9:
            raise ValueError("decode_budget shares must be >= 0 and add up to at most 1")
        return value

    @field_validator("baseline_tok_s")
    @classmethod
    def _points(cls, value: dict[int, float]) -> dict[int, float]:
        if len(value) < 2 or any(v <= 0 for v in value.values()):
            raise ValueError("baseline_tok_s needs two or more concurrency levels with tok/s > 0")
        return value

    @field_validator("spec_mode_overhead_ms")
    @classmethod
    def _range(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not 0 <= value[0] <= value[1]:
            raise ValueError("spec_mode_overhead_ms must be [low, high] with 0 <= low <= high")
        return value

    def baseline_step_s(self, concurrency: float) -> float:
        """The measured decode step (concurrency / tok/s), linear in concurrency between and past
        the measured points."""
        points = sorted((c, c / tok_s) for c, tok_s in self.baseline_tok_s.items())
        xs = np.array([p[0] for p in points], float)
        ys = np.array([p[1] for p in points], float)
        return interp_linear(float(concurrency), xs, ys)



@dataclass(frozen=True)
class MoECost:
    """How the MoE part's time follows the distinct experts a layer loads and the step's tokens
    (any unit: only ratios are used), and where that line was measured."""

    name: str
    source: str
    cost: Callable[[float, float], float]


def rank_moe(forms: PartForms) -> MoECost:
    """The TP-8 rank's MoE line from the step curves (1/8 slices of every expert, bf16, H200)."""
    if forms.moe is None:
        raise SpeclabError(f"The step curves of {forms.shape} have no MoE part.")
    machine = forms.machine.get("gpu_name", "GPU")
    return MoECost("TP-8 rank", f"{machine} step curves, {forms.shape}: MoE part against distinct experts "
                   f"({forms.moe[1] * 1e3:.1f} us per expert a step over all layers)",
                   lambda d, t: forms.moe_ms(t, d))


def full_expert_moe(curve: VerifyCurve) -> MoECost:
    """The full-expert layer's line (``moe_layer_bench``: all of each expert on one GPU)."""
    return MoECost("full-expert layer", f"{curve.label}: one layer, whole experts "
                   f"({curve.per_expert_s * 1e6:.1f} us per expert)",
                   lambda d, t: float(curve.step_s(d, t)))


@lru_cache(maxsize=4)
def _rank_forms(paths: tuple[str, ...] | None) -> PartForms:
    frame = load_gpu_step(list(paths) if paths is not None else None)
    return fit_part_forms(frame, RANK_SHAPE)


def rank_forms(paths: Sequence[str | Path] | None = None) -> PartForms:
    """The TP-8 rank's fitted forms from the shipped H200 curves (or the files given)."""
    return _rank_forms(tuple(str(p) for p in paths) if paths is not None else None)


def scenario_acceptance(scenario: SeedScenario) -> dict[str, Any]:
    """n-gram acceptance from the scenario's assumed ``alpha`` (no baseline replayed)."""
    k, f = scenario.num_speculative_tokens, scenario.draft_fraction
    drafted = expected_tokens_per_step(scenario.alpha, k)
    return {"tokens_per_step": 1 + f * (drafted - 1), "verified_tokens_per_seq": 1 + f * k, "label": "assumed",
            "source": f"alpha {scenario.alpha} per token at k={k}, drafts on {f:.0%} of steps (assumed: what makes "
                      "the naive model say ~2x)", "measured": False}


class SeedStepModel:
    """T(B, n) of the seeds' deployment, part by part (module docstring).

    ``budget`` (MoE-Spec) caps the experts each sequence's verify group loads; ``draft_s``
    adds a drafter's time to every speculative step (EAGLE-3), on top of the mode's overhead.
    """

    def __init__(self, scenario: SeedScenario, forms: PartForms, moe: MoECost, routing: RoutingModel,
                 budget: int | None = None, strategy: Strategy = "substitution", draft_s: float = 0.0,
                 samples: int = 300, seed: int = 0) -> None:
        self.scenario, self.forms, self.moe, self.routing = scenario, forms, moe, routing
        self.budget, self.strategy, self.draft_s = budget, strategy, draft_s
        self.samples, self.seed = samples, seed
        c0 = float(scenario.profile_concurrency)
        self.profile_step_ms = scenario.baseline_step_s(c0) * 1e3
        shares = scenario.decode_budget
        level = {"communication": shares["all_reduce"], "attention": shares["attention"],
                 "other_gemm": shares["other_gemm"], "moe": shares["moe_gemm"]}
        level["other"] = max(1.0 - sum(level.values()), 0.0)
        self.level_ms = {p: v * self.profile_step_ms for p, v in level.items()}
        ctx = float(scenario.context_tokens)
        self.allreduce = AllReduceForm(bus_gb_s=scenario.allreduce_bus_gb_s, gpus=scenario.tensor_parallel)
        n_ar = 2 * scenario.layers
        msg = 2.0 * scenario.hidden_size

        def comm(b: float, n: float) -> float:
            extra = self.allreduce.us(msg * b * n) - self.allreduce.us(msg * c0)
            return self.level_ms["communication"] + n_ar * extra / 1e3

        def ratio(fn: Callable[[float, float], float]) -> Callable[[float, float], float]:
            ref = fn(c0, 1.0)
            return lambda b, n: fn(b, n) / ref if ref > 0 else 1.0

        attention = ratio(lambda b, n: forms.attention_ms(b, n, ctx))
        gemm = ratio(lambda b, n: forms.gemm_ms(b * n))
        other = ratio(lambda b, n: forms.other_ms(b * n))
        moe_ref = moe.cost(self.experts_loaded(c0, 1.0), c0)

        def moe_ms(b: float, n: float) -> float:
            return self.level_ms["moe"] * moe.cost(self.experts_loaded(b, n), b * n) / moe_ref

        where = forms.machine.get("gpu_name", "GPU")
        level_note = f"level: {{share:.1%}} of the seeds' {self.profile_step_ms:.1f} ms step at concurrency {c0:g}"
        parts: list[PartScaling] = []
        if scenario.scaling == "linear_in_tokens":
            points = sorted((c, c / t) for c, t in scenario.baseline_tok_s.items())
            slope, fixed = np.polyfit([p[0] for p in points], [p[1] for p in points], 1)

            def linear(part: str) -> Callable[[float, float], float]:
                return lambda b, n: self.level_ms[part] * (fixed + slope * b * n) / (fixed + slope * c0)

            for part in ("communication", "attention", "other_gemm", "other"):
                parts.append(PartScaling(part, "assumed", "linear in the step's tokens like the baseline in "
                                         "sequences (the old model: each draft token priced as a new sequence)",
                                         linear(part)))
        else:
            parts += [
                PartScaling("communication", "borrowed", f"{self.allreduce.source}; "
                            + level_note.format(share=level["communication"]), comm),
                PartScaling("attention", "fitted", f"{where} step curves, {forms.shape} attention at "
                            f"{ctx:g} tokens of context (assumed); " + level_note.format(share=level["attention"]),
                            lambda b, n: self.level_ms["attention"] * attention(b, n)),
                PartScaling("other_gemm", "fitted", f"{where} step curves, {forms.shape} GEMMs: flat to a knee at "
                            f"{forms.knee:g} tokens; " + level_note.format(share=level["other_gemm"]),
                            lambda b, n: self.level_ms["other_gemm"] * gemm(b, n)),
                PartScaling("other", "fitted", f"{where} step curves, {forms.shape} norms, activations, sampling; "
                            + level_note.format(share=level["other"]),
                            lambda b, n: self.level_ms["other"] * other(b, n)),
            ]
        budget_note = f", budget {budget} ({strategy})" if budget is not None else ""
        parts.insert(2, PartScaling("moe", "fitted", f"{moe.source}; distinct experts under {routing.label} routing"
                                    f"{budget_note}; " + level_note.format(share=level["moe"]), moe_ms))
        explained = PartsStepTime(list(parts))
        self.explained_step_ms: Callable[[float], float] = lambda b: sum(explained.parts_ms(b, 1.0).values())
        if scenario.unexplained_scaling != "off":
            top = max(scenario.baseline_tok_s)
            tokens = scenario.unexplained_scaling == "tokens"
            grows = "the step's tokens (like the old model)" if tokens else "sequences, not draft tokens"
            parts.append(PartScaling(
                "unexplained", "fitted",
                f"the seeds' measured baseline minus the parts ({self.unexplained_ms(top):+.1f} ms at concurrency "
                f"{top}); assumed to grow with {grows}",
                (lambda b, n: self.unexplained_ms(b * n)) if tokens else (lambda b, n: self.unexplained_ms(b))))
        self.parts = PartsStepTime(parts, spec_overhead_ms=scenario.spec_mode_overhead_ms,
                                   spec_overhead_label="borrowed", spec_overhead_source=SPEC_OVERHEAD_SOURCE)

    def unexplained_ms(self, batch: float) -> float:
        """The measured decode step (linear between the seeds' points) minus the parts' sum."""
        return self.scenario.baseline_step_s(batch) * 1e3 - self.explained_step_ms(batch)

    def experts_loaded(self, batch: float, verified_tokens_per_seq: float) -> float:
        budget = self.budget if verified_tokens_per_seq > 1.0 else None
        return loaded_per_step(self.routing, batch, verified_tokens_per_seq, budget, self.strategy,
                               self.samples, self.seed)

    def baseline_step_s(self, batch: float) -> float:
        return self.parts.step_time_s(batch, 1.0)

    def step_time_s(self, batch: float, verified_tokens_per_seq: float = 1.0) -> float:
        spec = verified_tokens_per_seq > 1.0
        return self.parts.step_time_s(batch, verified_tokens_per_seq) + (self.draft_s if spec else 0.0)


# --------------------------------------------------------------------------- the explanation


@dataclass
class SeedsExplanation:
    """What ``speclab explain-seeds`` prints and 04-moespec shows (:func:`explain_seeds`)."""

    parts: pd.DataFrame  # routing x moe curve x concurrency x part: the waterfall rows
    summary: pd.DataFrame  # routing x moe curve x concurrency: the prediction, its driver, the band
    baseline_check: pd.DataFrame  # the model's T(B, 1) against the seeds' measured points
    overhead_needed: pd.DataFrame  # where the model does not reach the measured loss: what overhead would
    acceptance: dict[str, Any]
    statements: list[str] = field(default_factory=list)


def explain_seeds(scenario: SeedScenario | None = None, acceptance: Mapping[str, Any] | None = None, *,
                  moe_curves: Mapping[str, MoECost] | None = None, routings: Sequence[str] = ("uniform",),
                  forms: PartForms | None = None, samples: int = 300) -> SeedsExplanation:
    """The seeds' n-gram prediction per routing, MoE curve and concurrency, in parts.

    ``acceptance``: ``tokens_per_step``, ``verified_tokens_per_seq``, ``label`` and ``source``
    (a replayed baseline, :func:`speclab.moe.workbook.ngram_acceptance`), else the scenario's
    assumed alpha. ``moe_curves``: name -> :class:`MoECost` (default: the TP-8 rank's line).
    """
    scenario = scenario or SeedScenario()
    forms = forms or rank_forms()
    acc = dict(acceptance) if acceptance is not None else scenario_acceptance(scenario)
    curves = dict(moe_curves) if moe_curves else {"TP-8 rank": rank_moe(forms)}
    e, verified = float(acc["tokens_per_step"]), float(acc["verified_tokens_per_seq"])
    lo, hi = scenario.measured_ngram_change
    parts, summary, overhead = [], [], []
    for text in routings:
        routing = parse_routing(text, scenario.routed_experts, scenario.experts_per_token)
        for name, moe in curves.items():
            model = SeedStepModel(scenario, forms, moe, routing, samples=samples)
            table = decompose_speedup(model.parts, scenario.concurrency, e, verified,
                                      acceptance_label=acc.get("label", "assumed"), acceptance_source=acc["source"])
            table.insert(0, "moe_curve", name)
            table.insert(0, "routing", routing.label)
            parts.append(table)
            for c in scenario.concurrency:
                rows = table[table["concurrency"] == c]
                last = rows[rows["part"] == SPEC_OVERHEAD].iloc[0]
                driver, cost = driving_part(table, c)
                speedup = float(last["speedup"])
                summary.append({
                    "routing": routing.label, "moe_curve": name, "concurrency": c,
                    "baseline_tok_s": c / scenario.baseline_step_s(c), "naive_speedup": e,
                    "verify_cost_ratio": float(last["verify_step_ms"] / last["decode_step_ms"]),
                    "speedup": speedup, "speedup_low_overhead": float(last["speedup_low_overhead"]),
                    "speedup_high_overhead": float(last["speedup_high_overhead"]),
                    "change_pct": (speedup - 1.0) * 100, "verdict": "loss" if speedup < 1.0 else "win",
                    "driving_part": driver, "driving_cost": cost,
                    "within_measured_band": 1 + lo <= speedup <= 1 + hi})
                if speedup > 1 + hi:
                    spec_parts = float(last["verify_step_ms"]) - model.parts.overhead_ms("mid")
                    t1 = float(last["decode_step_ms"])
                    need = {f"overhead_for_{int(round(-x * 100))}pct_loss_ms": e * t1 / (1 + x) - spec_parts
                            for x in (hi, lo)}
                    tv = float(last["verify_step_ms"])
                    need.update({f"tokens_per_step_for_{int(round(-x * 100))}pct_loss": (1 + x) * tv / t1
                                 for x in (hi, lo)})
                    overhead.append({"routing": routing.label, "moe_curve": name, "concurrency": c,
                                     "predicted_speedup": speedup, **need,
                                     "borrowed_low_ms": scenario.spec_mode_overhead_ms[0],
                                     "borrowed_high_ms": scenario.spec_mode_overhead_ms[1]})
    checks = []
    for name, moe in curves.items():
        model = SeedStepModel(scenario, forms, moe, parse_routing(routings[0], scenario.routed_experts,
                                                                  scenario.experts_per_token), samples=samples)
        checks += [{"moe_curve": name, "concurrency": c, "measured_step_ms": 1e3 * c / tok_s,
                    "parts_step_ms": model.explained_step_ms(c), "model_step_ms": model.baseline_step_s(c) * 1e3}
                   for c, tok_s in sorted(scenario.baseline_tok_s.items())]
    check = pd.DataFrame(checks)
    check["parts_explain_pct"] = check["parts_step_ms"] / check["measured_step_ms"] * 100
    out = SeedsExplanation(parts=pd.concat(parts, ignore_index=True), summary=pd.DataFrame(summary),
                           baseline_check=check, overhead_needed=pd.DataFrame(overhead), acceptance=acc)
    out.statements = seeds_statements(out, scenario)
    return out


def seeds_statements(result: SeedsExplanation, scenario: SeedScenario) -> list[str]:
    """Plain sentences from the tables: where the model predicts a loss, by how much, what drives
    it, how the baseline is reproduced, and what overhead the measured loss would need."""
    acc = result.acceptance
    out = [f"Acceptance: {acc['tokens_per_step']:.2f} tokens per step, {acc['verified_tokens_per_seq']:.2f} "
           f"verified per sequence ({acc.get('label', 'assumed')}: {acc['source']})."]
    for (routing, curve), part in result.summary.groupby(["routing", "moe_curve"], sort=False):
        losses = part[part["verdict"] == "loss"]
        wins = part[part["verdict"] == "win"]
        head = f"{routing} routing, {curve} MoE line:"
        if losses.empty:
            out.append(f"{head} a win at every concurrency ({part['speedup'].min():.2f}x at worst).")
            continue
        cells = ", ".join(f"{int(r.concurrency)}: {r.change_pct:+.0f} % ({r.driving_part})"
                          for r in losses.itertuples())
        text = f"{head} a loss at concurrency {cells}"
        if not wins.empty:
            text += "; a win at " + ", ".join(f"{int(r.concurrency)} ({r.speedup:.2f}x)" for r in wins.itertuples())
        out.append(text + ".")
    check = result.baseline_check
    reproduced = "; ".join(f"{r.moe_curve} line at concurrency {int(r.concurrency)}: {r.parts_step_ms:.1f} of "
                           f"{r.measured_step_ms:.1f} ms" for r in check.itertuples() if r.concurrency != 
                           scenario.profile_concurrency)
    rest = ("left out (unexplained_scaling off)" if scenario.unexplained_scaling == "off" else
            f"the 'unexplained' part, grown with {scenario.unexplained_scaling} (assumed)")
    out.append(f"The parts reproduce the seeds' baseline step at the profile's concurrency by construction, and "
               f"{reproduced}; the rest is {rest}.")
    if not result.overhead_needed.empty:
        first = result.overhead_needed.iloc[0]
        cols = [c for c in result.overhead_needed if c.startswith("overhead_for_")]
        acc_cols = [c for c in result.overhead_needed if c.startswith("tokens_per_step_for_")]
        out.append(f"Where the model predicts a win the seeds contradict (concurrency {int(first['concurrency'])}, "
                   f"{first['routing']}, {first['moe_curve']}: {first['predicted_speedup']:.2f}x), the measured 9-26 % "
                   f"loss would need {first[cols[0]]:.1f}-{first[cols[1]]:.1f} ms of speculative-mode overhead per "
                   f"step (the borrowed range is {scenario.spec_mode_overhead_ms[0]:g}-"
                   f"{scenario.spec_mode_overhead_ms[1]:g} ms), or acceptance of {first[acc_cols[1]]:.2f}-"
                   f"{first[acc_cols[0]]:.2f} tokens per step instead of {acc['tokens_per_step']:.2f}.")
    return out


# --------------------------------------------------------------------------- budgets (04-moespec)


def predict_budget_speedups(scenario: SeedScenario, forms: PartForms, moe: MoECost, routing: RoutingModel,
                            options: Sequence[Mapping[str, Any]], budgets: Sequence[int | None],
                            strategies: Sequence[Strategy] = ("substitution",),
                            samples: int = 300, seed: int = 0) -> pd.DataFrame:
    """Predicted tok/s and speedup per option x budget x concurrency on ``scenario``.

    ``options``: dicts with ``option`` (label), ``k``, ``tokens_per_step`` (1 + accepted per
    step, measured or replayed), ``verified_tokens_per_seq`` (1 + drafted per step) and
    optionally ``draft_cost`` (drafting time per step as a share of a baseline step).
    Acceptance is held at the given figure under a budget: what a budget costs in acceptance
    is not measured here (see the routing-mass proxy and the borrowed figures).
    """
    rows = []
    for strategy in strategies:
        for budget in budgets:
            if budget is None and strategy != strategies[0]:
                continue
            model = SeedStepModel(scenario, forms, moe, routing, budget, strategy, samples=samples, seed=seed)
            for opt in options:
                for c in scenario.concurrency:
                    model.draft_s = float(opt.get("draft_cost", 0.0)) * model.baseline_step_s(c)
                    row = predict_speedup(model, c, float(opt["tokens_per_step"]), float(opt["verified_tokens_per_seq"]))
                    rows.append({
                        "option": opt["option"], "k": opt.get("k"), "routing": routing.label, "moe_curve": moe.name,
                        "budget": "none" if budget is None else int(budget),
                        "strategy": "-" if budget is None else strategy, "concurrency": c,
                        "tokens_per_step": row["tokens_per_step"], "verify_cost_ratio": row["verify_cost_ratio"],
                        "baseline_tok_s": c / scenario.baseline_step_s(c),
                        "predicted_tok_s": c / scenario.baseline_step_s(c) * row["speedup"],
                        "predicted_speedup": row["speedup"],
                    })
    return pd.DataFrame(rows)


def parts_pivot(table: pd.DataFrame) -> pd.DataFrame:
    """The waterfall rows as one line per concurrency: each part's speedup change, with labels
    in the column names (for a compact table)."""
    labels = table.drop_duplicates("part").set_index("part")["label"]
    wide = table.pivot_table(index="concurrency", columns="part", values="speedup_change", sort=False)
    wide.columns = [f"{p} ({labels[p]})" for p in wide.columns]
    last = table[table["part"] == SPEC_OVERHEAD].set_index("concurrency")
    wide["speedup"] = last["speedup"]
    return wide.reset_index()
