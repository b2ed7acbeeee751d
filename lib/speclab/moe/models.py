"""Why verification costs more on a Mixture-of-Experts model, and what an expert budget buys.

A step that verifies ``n`` tokens per layer routes each of them to ``top_k`` of ``E``
experts; the layer reads the weights of every *distinct* expert touched, so a decode-time
MoE layer (bound by reading weights) costs about ``a + D(n)`` expert-loads, where ``D(n)``
is the number of distinct experts. ``docs/moe.md`` gives the method and its sources.

This module is analysis only (numpy/pandas/scipy): routing models and their distinct-expert
curves, fits to real routing, the verify-cost curve measured by :mod:`speclab.moe.bench`,
and the expert-budget what-if (MoE-Spec, McDanel et al., arXiv 2602.16052); :mod:`speclab.moe.seeds`
turns them into predicted tok/s for the seeds' deployment.

**Routing model** (:class:`RoutingModel`): every token scores each expert
``log pop_e + g_e`` with Gumbel noise ``g`` and takes the top ``k`` scores, which is exactly
sampling ``k`` experts without replacement with probabilities ``pop`` (Gumbel top-k).
``pop`` is uniform (``zipf_s = 0``) or Zipf, ``pop ∝ 1 / rank^s`` over a random order of the
experts, fixed per layer. Adjacent tokens share expert choices through the noise: the
Gumbel noise of token ``t`` is the Gaussian-copula AR(1) of token ``t-1``'s with correlation
``rho`` (``rho = 0``: independent tokens). The router's probabilities are
``softmax(log pop + g)``, which is what the budget ranks experts by.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy.signal import lfilter
from scipy.special import ndtr

from speclab.errors import SpeclabError

__all__ = [
    "BORROWED_MOE_SPEC",
    "BudgetResult",
    "RoutingModel",
    "RoutingSample",
    "VerifyCurve",
    "budget_sweep",
    "distinct_experts_uniform",
    "distinct_from_inclusion",
    "fit_routing",
    "loaded_per_step",
    "parse_routing",
    "sample_routing",
    "simulate_distinct",
    "trace_distinct_curve",
]

Strategy = Literal["substitution", "truncation"]

# What the MoE-Spec paper and related work report. Borrowed figures: shown beside the
# routing-mass proxy, never as measurements (docs/moe.md lists where each comes from).
BORROWED_MOE_SPEC = pd.DataFrame([
    {"source": "MoE-Spec (arXiv 2602.16052)", "claim": "throughput over EAGLE-3, expert budget + substitution",
     "value": "+10 to +30 %", "models": "OLMoE-1B-7B, Qwen3-30B-A3B, Mixtral-8x7B"},
    {"source": "MoE-Spec (arXiv 2602.16052)", "claim": "active experts cut while matching full quality",
     "value": "about 25 % fewer", "models": "same"},
    {"source": "MoE-Spec repo sweep (BradMcDanel/EAGLE sweeps/olmoe_cardinality_sweep.yaml)",
     "claim": "budgets swept for OLMoE (64 experts, top-8, 63-token draft tree)",
     "value": "B in 8..48", "models": "OLMoE-1B-7B"},
    {"source": "Cascade (arXiv 2506.20675)", "claim": "drafted tokens raise MoE verification time",
     "value": "2-3x; speculation up to 1.5x slower", "models": "5 MoEs on vLLM"},
    {"source": "Cohere blog, 21 Apr 2026", "claim": "verifying 4 adjacent tokens loads unique expert weights of",
     "value": "about 2.5x one token (not 4x)", "models": "production MoEs"},
])


# --------------------------------------------------------------------------- distinct experts


def distinct_experts_uniform(tokens: float | np.ndarray, experts: int, top_k: int) -> Any:
    """Expected distinct experts for ``tokens`` independent tokens under uniform routing:
    ``E * (1 - (1 - K/E)^n)`` (each expert is missed by one token with probability 1 - K/E)."""
    _check_shape(experts, top_k)
    return experts * (1.0 - (1.0 - top_k / experts) ** np.asarray(tokens, dtype=float))


def distinct_from_inclusion(inclusion: np.ndarray, tokens: float | np.ndarray) -> Any:
    """Expected distinct experts for independent tokens, given each expert's probability of
    being in one token's top-k: ``sum_e 1 - (1 - pi_e)^n``."""
    pi = np.clip(np.asarray(inclusion, dtype=float), 0.0, 1.0)
    n = np.atleast_1d(np.asarray(tokens, dtype=float))
    out = np.array([float(np.sum(1.0 - (1.0 - pi) ** v)) for v in n])
    return out if np.ndim(tokens) else float(out[0])


def _check_shape(experts: int, top_k: int) -> None:
    if experts < 1 or top_k < 1 or top_k > experts:
        raise SpeclabError(f"An MoE layer needs 1 <= top_k <= experts; got top_k={top_k}, experts={experts}.")


@dataclass(frozen=True)
class RoutingModel:
    """How tokens pick experts in one layer (module docstring)."""

    experts: int
    top_k: int
    zipf_s: float = 0.0
    rho: float = 0.0
    name: str = ""

    def __post_init__(self) -> None:
        _check_shape(self.experts, self.top_k)
        if self.zipf_s < 0:
            raise SpeclabError(f"zipf_s must be >= 0 (0 = uniform); got {self.zipf_s}.")
        if not 0.0 <= self.rho < 1.0:
            raise SpeclabError(f"rho (adjacent-token correlation) must lie in [0, 1); got {self.rho}.")

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        parts = ["uniform" if self.zipf_s == 0 else f"zipf{self.zipf_s:g}"]
        if self.rho > 0:
            parts.append(f"rho{self.rho:g}")
        return " ".join(parts)

    def log_popularity(self, rng: np.random.Generator) -> np.ndarray:
        """log pop_e for one layer: Zipf over a random order of the experts (uniform at s = 0)."""
        ranks = rng.permutation(self.experts) + 1.0
        logits = -self.zipf_s * np.log(ranks)
        return logits - np.log(np.exp(logits).sum())


def parse_routing(text: str, experts: int, top_k: int) -> RoutingModel:
    """``uniform``, ``zipfS``, ``rhoR`` or ``zipfS+rhoR`` (e.g. ``zipf1.0+rho0.5``) as a model."""
    zipf_s, rho = 0.0, 0.0
    for part in str(text).replace(" ", "").lower().split("+"):
        try:
            if part == "uniform":
                continue
            if part.startswith("zipf"):
                zipf_s = float(part[4:])
            elif part.startswith("rho"):
                rho = float(part[3:])
            else:
                raise ValueError(part)
        except ValueError:
            raise SpeclabError(f"Routing {text!r} is not uniform, zipfS, rhoR or zipfS+rhoR "
                               "(e.g. zipf1.0+rho0.5).") from None
    return RoutingModel(experts, top_k, zipf_s, rho, name=str(text))


@dataclass
class RoutingSample:
    """Routes of consecutive tokens in one layer: ids [tokens, top_k], router probs [tokens, E],
    and each expert's popularity rank in that layer (0 = most popular)."""

    ids: np.ndarray
    probs: np.ndarray
    rank_of: np.ndarray | None = None


def sample_routing(model: RoutingModel, tokens: int, rng: np.random.Generator,
                   layers: int = 1) -> list[RoutingSample]:
    """``layers`` independent draws of ``tokens`` consecutive tokens' routing under ``model``."""
    if tokens < 1:
        raise SpeclabError(f"tokens must be >= 1; got {tokens}.")
    out = []
    for _ in range(layers):
        log_pop = model.log_popularity(rng)
        z = rng.standard_normal((tokens, model.experts), dtype=np.float32)
        if model.rho > 0 and tokens > 1:
            # AR(1) in token order (adjacent tokens share part of their noise), stationary:
            # z_0 = e_0, z_t = rho z_(t-1) + sqrt(1 - rho^2) e_t.
            z[1:] *= math.sqrt(1.0 - model.rho**2)
            z = lfilter([1.0], [1.0, -model.rho], z, axis=0)
        u = np.clip(ndtr(z).astype(np.float32), 1e-7, 1 - 1e-7)
        scores = log_pop.astype(np.float32) - np.log(-np.log(u))
        ids = np.argpartition(-scores, model.top_k - 1, axis=1)[:, : model.top_k]
        probs = np.exp(scores - scores.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        rank_of = np.empty(model.experts, int)
        rank_of[np.argsort(-log_pop, kind="stable")] = np.arange(model.experts)
        out.append(RoutingSample(ids=ids, probs=probs, rank_of=rank_of))
    return out


def _distinct(ids: np.ndarray) -> int:
    return int(np.unique(ids).size)


def simulate_distinct(model: RoutingModel, tokens: Sequence[int], samples: int = 400,
                      seed: int = 0) -> pd.DataFrame:
    """Mean (and spread of) distinct experts touched by ``n`` consecutive tokens, per ``n``.

    One draw of ``max(tokens)`` consecutive tokens per sample; the first ``n`` of it give
    the point at ``n``, so every ``n`` shares the same layers and the curve is smooth.
    """
    rng = np.random.default_rng(seed)
    ns = sorted({int(n) for n in tokens})
    counts = np.zeros((samples, len(ns)))
    for s, draw in enumerate(sample_routing(model, ns[-1], rng, layers=samples)):
        for j, n in enumerate(ns):
            counts[s, j] = _distinct(draw.ids[:n])
    return pd.DataFrame({
        "routing": model.label, "tokens": ns, "distinct_experts": counts.mean(axis=0),
        "distinct_experts_sd": counts.std(axis=0), "samples": samples,
    })


def inclusion_probabilities(model: RoutingModel, samples: int = 4000, seed: int = 0) -> np.ndarray:
    """Each popularity rank's probability of being in one token's top-k (sorted, descending)."""
    rng = np.random.default_rng(seed)
    hits = np.zeros(model.experts)
    for draw in sample_routing(RoutingModel(model.experts, model.top_k, model.zipf_s), 1, rng, layers=samples):
        order = np.argsort(-draw.probs[0])  # rank experts by this layer's popularity order
        ranks = np.empty(model.experts, int)
        ranks[order] = np.arange(model.experts)
        hits[ranks[draw.ids[0]]] += 1
    return np.sort(hits / samples)[::-1]


# --------------------------------------------------------------------------- traces


def trace_distinct_curve(routes: np.ndarray, tokens: Sequence[int], *, label: str = "trace") -> pd.DataFrame:
    """Distinct experts in windows of ``n`` consecutive tokens of real routing.

    ``routes``: int array [tokens, layers, top_k] in token order (one request's committed
    tokens, e.g. :func:`speclab.moe.traces.returned_routes`). Every window of ``n`` adjacent
    tokens (sliding, all start positions) in every layer is one observation. Committed
    tokens only: what verification of rejected drafts also loaded is not in such a trace,
    so this is a lower bound on verify-pass unions.
    """
    arr = np.asarray(routes)
    if arr.ndim != 3:
        raise SpeclabError(f"Routes must be [tokens, layers, top_k]; got shape {arr.shape}.")
    rows = []
    for n in sorted({int(t) for t in tokens}):
        if n > arr.shape[0]:
            continue
        counts = [
            _distinct(arr[start:start + n, layer])
            for layer in range(arr.shape[1]) for start in range(arr.shape[0] - n + 1)
        ]
        rows.append({"routing": label, "tokens": n, "distinct_experts": float(np.mean(counts)),
                     "distinct_experts_sd": float(np.std(counts)), "samples": len(counts)})
    return pd.DataFrame(rows)


def popularity_skew(routes: np.ndarray, experts: int) -> float:
    """Zipf exponent of the trace's expert popularity, per layer then averaged: the slope of
    log(frequency) against log(rank) over the experts that were used at least once."""
    arr = np.asarray(routes)
    slopes = []
    for layer in range(arr.shape[1]):
        freq = np.bincount(arr[:, layer].ravel(), minlength=experts).astype(float)
        freq = np.sort(freq[freq > 0])[::-1]
        if freq.size < 3:
            continue
        ranks = np.arange(1, freq.size + 1)
        slopes.append(-np.polyfit(np.log(ranks), np.log(freq), 1)[0])
    return float(max(np.mean(slopes), 0.0)) if slopes else 0.0


@dataclass
class FittedRouting:
    """A routing model fitted to a trace, with the curves it was fitted on."""

    model: RoutingModel
    curve: pd.DataFrame  # trace vs model, per tokens
    error: float  # root-mean-square relative error of the model curve on the trace's points


def fit_routing(trace_curve: pd.DataFrame, experts: int, top_k: int, *,
                zipf_grid: Iterable[float] = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5),
                rho_grid: Iterable[float] = (0.0, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
                samples: int = 150, seed: int = 0) -> FittedRouting:
    """The (zipf_s, rho) on the grids whose simulated distinct-experts curve is closest
    (relative squared error) to the trace's, at the trace's token counts."""
    ns = [int(n) for n in trace_curve["tokens"]]
    observed = trace_curve["distinct_experts"].to_numpy(float)
    best: tuple[float, RoutingModel, pd.DataFrame] | None = None
    for s in zipf_grid:
        for rho in rho_grid:
            model = RoutingModel(experts, top_k, float(s), float(rho))
            sim = simulate_distinct(model, ns, samples=samples, seed=seed)
            err = float(np.sqrt(np.mean((sim["distinct_experts"].to_numpy() / observed - 1.0) ** 2)))
            if best is None or err < best[0]:
                best = (err, model, sim)
    assert best is not None
    err, model, sim = best
    fitted = RoutingModel(experts, top_k, model.zipf_s, model.rho, name=f"fitted ({model.label})")
    curve = pd.concat([trace_curve.assign(source="trace"),
                       sim.assign(routing=fitted.label, source="fitted model")], ignore_index=True)
    return FittedRouting(model=fitted, curve=curve, error=err)


# --------------------------------------------------------------------------- verify cost


@dataclass
class VerifyCurve:
    """MoE layer step time against distinct experts (and tokens), from a layer benchmark.

    ``points``: columns ``tokens``, ``routing``, ``distinct_experts``, ``step_s`` (one
    shape). Fitted ``step_s = fixed_s + per_expert_s * distinct_experts + per_token_s * tokens``
    (non-negative least squares): decode-time MoE reads each touched expert's weights once,
    so time follows distinct experts; the token term is the GEMM work that grows once
    experts see many tokens each (large batches). The residuals say how well it holds.
    """

    points: pd.DataFrame
    top_k: int
    experts: int
    label: str = ""
    fixed_s: float = field(init=False)
    per_expert_s: float = field(init=False)
    per_token_s: float = field(init=False)

    def __post_init__(self) -> None:
        from scipy.optimize import nnls

        if self.points.empty or {"distinct_experts", "step_s", "tokens"} - set(self.points):
            raise SpeclabError("A verify-cost curve needs points with tokens, distinct_experts and step_s.")
        d = self.points["distinct_experts"].to_numpy(float)
        n = self.points["tokens"].to_numpy(float)
        y = self.points["step_s"].to_numpy(float)
        w = 1.0 / np.maximum(y, 1e-12)  # relative errors: small (decode) steps weigh as much as big ones
        # Tokens and distinct experts rise together, so fit in two stages: the expert line on the
        # decode regime (at most ~2 tokens per touched expert: weight reads dominate), then the
        # token term on what is left over everywhere (GEMM work once experts see many tokens).
        regime = n * self.top_k / np.maximum(d, 1e-9) <= 2.0
        if regime.sum() < 2 or np.unique(np.round(d[regime], 3)).size < 2:
            regime = np.ones_like(d, dtype=bool)
        coef, _ = nnls(np.column_stack([np.ones(regime.sum()), d[regime]]) * w[regime, None], y[regime] * w[regime])
        self.fixed_s, self.per_expert_s = float(coef[0]), float(coef[1])
        if self.per_expert_s <= 0:  # noise swamped the slope: time proportional to experts
            self.fixed_s, self.per_expert_s = 0.0, float(np.median(y / np.maximum(d, 1e-9)))
        residual = y - self.fixed_s - self.per_expert_s * d
        token_coef, _ = nnls((n * w)[:, None], residual * w)
        self.per_token_s = float(token_coef[0])

    def step_s(self, distinct_experts: float | np.ndarray, tokens: float | np.ndarray | None = None) -> Any:
        """Layer time for a step touching this many distinct experts with ``tokens`` tokens
        (None: as few tokens as can touch them, ``distinct / top_k``)."""
        d = np.asarray(distinct_experts, dtype=float)
        n = d / self.top_k if tokens is None else np.asarray(tokens, dtype=float)
        return self.fixed_s + self.per_expert_s * d + self.per_token_s * n

    def multiplier(self, distinct_experts: float | np.ndarray, tokens: float | np.ndarray | None = None) -> Any:
        """Layer time / a one-token step's (``top_k`` experts, one token)."""
        return self.step_s(distinct_experts, tokens) / self.step_s(self.top_k, 1.0)

    def fit_table(self) -> pd.DataFrame:
        """Measured vs fitted, per point (ms), with the residual in %."""
        table = self.points.copy()
        table["step_ms"] = table["step_s"] * 1e3
        table["fitted_ms"] = self.step_s(table["distinct_experts"], table["tokens"]) * 1e3
        table["residual_pct"] = (table["step_ms"] / table["fitted_ms"] - 1.0) * 100
        return table

    def measured_multipliers(self, routing: str, tokens: Sequence[int] = (2, 4, 8)) -> dict[int, float]:
        """Measured layer time at ``n`` tokens / at one token, for one routing of the benchmark."""
        rows = self.points[self.points["routing"] == routing].set_index("tokens")["step_s"]
        if 1 not in rows.index:
            raise SpeclabError(f"The benchmark has no one-token point for routing {routing!r}.")
        return {int(n): float(rows[n] / rows[1]) for n in tokens if n in rows.index}


# --------------------------------------------------------------------------- expert budget


@dataclass
class BudgetResult:
    """One verify group under a per-layer budget of ``budget`` experts."""

    budget: int
    strategy: Strategy
    experts_loaded: float
    experts_unbudgeted: float
    topk_kept: float  # share of the tokens' original top-k assignments still used
    mass_kept: float  # router probability mass of the experts used / of the original top-k


def _budgeted_experts(sample: RoutingSample, budget: int, strategy: Strategy) -> np.ndarray:
    """The distinct experts a verify group loads under the budget (see :func:`apply_budget`)."""
    probs, ids = sample.probs, sample.ids
    keep = np.argsort(-probs.sum(axis=0), kind="stable")[:budget]
    if strategy == "truncation":
        return np.intersect1d(np.unique(ids), keep)
    width = min(ids.shape[1], budget)
    if width >= budget:
        return np.sort(keep)
    picks = np.argpartition(-probs[:, keep], width - 1, axis=1)[:, :width]
    return np.unique(keep[picks])


def apply_budget(sample: RoutingSample, budget: int, strategy: Strategy) -> BudgetResult:
    """MoE-Spec's budget on one verify group (one layer, the tokens of ``sample``).

    Experts are ranked by router probability summed over the group's tokens; the top
    ``budget`` are loaded. *Substitution*: each token re-picks its top-k among the kept
    experts (so it still runs k experts; renormalising their weights changes the output,
    not which weights are read). *Truncation*: each token keeps only its own top-k experts
    that fall inside the budget (fewer than k where some were dropped).
    """
    probs, ids = sample.probs, sample.ids
    n, experts = probs.shape
    k = ids.shape[1]
    budget = int(min(max(budget, 1), experts))
    keep = np.argsort(-probs.sum(axis=0), kind="stable")[:budget]
    kept_mask = np.zeros(experts, bool)
    kept_mask[keep] = True
    original_mass = np.take_along_axis(probs, ids, axis=1)  # [n, k]
    in_budget = kept_mask[ids]  # [n, k]
    unbudgeted = _distinct(ids)
    if strategy == "truncation":
        loaded = _distinct(ids[in_budget])
        mass = float((original_mass * in_budget).sum() / original_mass.sum())
    elif strategy == "substitution":
        width = min(k, budget)
        sub = probs[:, keep]  # [n, budget]: re-pick among the kept experts only
        picks = np.argpartition(-sub, width - 1, axis=1)[:, :width] if width < budget else \
            np.broadcast_to(np.arange(budget), (n, budget))
        loaded = _distinct(keep[picks])
        mass = float(np.take_along_axis(sub, picks, axis=1).sum() / original_mass.sum())
    else:
        raise SpeclabError(f"Budget strategy must be 'substitution' or 'truncation'; got {strategy!r}.")
    return BudgetResult(budget, strategy, float(loaded), float(unbudgeted), float(in_budget.mean()),
                        min(mass, 1.0))


def budget_sweep(model: RoutingModel, tokens: int, budgets: Sequence[int],
                 strategies: Sequence[Strategy] = ("substitution", "truncation"),
                 curve: VerifyCurve | None = None, samples: int = 200, seed: int = 0) -> pd.DataFrame:
    """Experts and bytes loaded, routing mass kept and verify cost per budget, for a verify
    group of ``tokens`` consecutive tokens; averaged over ``samples`` simulated layers."""
    rng = np.random.default_rng(seed)
    draws = sample_routing(model, tokens, rng, layers=samples)
    rows = []
    for strategy in strategies:
        for budget in sorted({int(b) for b in budgets}):
            results = [apply_budget(d, budget, strategy) for d in draws]
            loaded = float(np.mean([r.experts_loaded for r in results]))
            unbudgeted = float(np.mean([r.experts_unbudgeted for r in results]))
            row: dict[str, Any] = {
                "routing": model.label, "tokens": tokens, "strategy": strategy, "budget": budget,
                "experts_loaded": loaded,
                "experts_unbudgeted": unbudgeted,
                "topk_kept": float(np.mean([r.topk_kept for r in results])),
                "mass_kept": float(np.mean([r.mass_kept for r in results])),
            }
            if curve is not None:
                expert_bytes = curve.points.attrs.get("expert_bytes")
                row["bytes_loaded_gib"] = loaded * expert_bytes / 2**30 if expert_bytes else math.nan
                row["verify_cost_x"] = float(curve.multiplier(loaded, tokens))
                row["verify_cost_unbudgeted_x"] = float(curve.multiplier(unbudgeted, tokens))
            rows.append(row)
    return pd.DataFrame(rows)


@lru_cache(maxsize=256)
def _inclusion_by_rank(model: RoutingModel, tokens: int, budget: int | None, strategy: str,
                       samples: int, seed: int) -> np.ndarray:
    """Per popularity rank: the probability that one sequence's verify group of ``tokens``
    tokens loads that expert (after its budget, if any)."""
    rng = np.random.default_rng(seed + 7919 * tokens)
    hits = np.zeros(model.experts)
    for draw in sample_routing(model, tokens, rng, layers=samples):
        if budget is None or _distinct(draw.ids) <= budget:
            used = np.unique(draw.ids)
        else:
            used = _budgeted_experts(draw, budget, strategy)  # type: ignore[arg-type]
        assert draw.rank_of is not None  # sample_routing always sets it
        hits[draw.rank_of[used]] += 1
    return hits / samples


def loaded_per_step(model: RoutingModel, batch: float, tokens_per_seq: float, budget: int | None = None,
                    strategy: Strategy = "substitution", samples: int = 300, seed: int = 0) -> float:
    """Expected experts one layer loads in a step of ``batch`` sequences that each verify
    ``tokens_per_seq`` consecutive tokens, the budget (if any) applied per sequence's group
    as MoE-Spec does per draft tree. Sequences route independently given the layer's
    popularity: loaded = sum over experts of 1 - (1 - q_e)^batch, with q_e one sequence's
    probability of loading expert e (simulated). Fractional tokens interpolate linearly."""
    lo = max(int(math.floor(tokens_per_seq)), 1)
    hi = max(int(math.ceil(tokens_per_seq)), 1)

    def union(n: int) -> float:
        q = _inclusion_by_rank(model, n, budget, strategy, samples, seed)
        return float(np.sum(1.0 - (1.0 - q) ** max(batch, 0.0)))

    if lo == hi:
        return union(lo)
    w = tokens_per_seq - lo
    return (1.0 - w) * union(lo) + w * union(hi)
