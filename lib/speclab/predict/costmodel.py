"""What a speculative step costs, and so what speculation gains, per concurrency.

Speculation trades steps for work: a step that verifies ``n`` tokens per sequence emits
``1 + accepted`` tokens but costs more than a one-token step. Leviathan et al. (2023),
for one sequence: speedup = E[tokens per step] / (k*c + T_verify(k+1) / T_decode).
Generalised to a batch of ``B`` sequences (every sequence shares the step):

    speedup(B) = tokens_per_step * T(B, 1) / (T(B, n) + T_draft(B))

with ``n = 1 + draft_fraction * k`` the mean tokens verified per sequence per step (vLLM
schedules no draft when its proposer finds nothing) and ``T(B, n)`` the step time.

**How step time is calibrated, not assumed.** Two models, the second preferred:

* :class:`StepCost`, one engine step at a time (:func:`fit_step_cost`): every step a run
  took, read back from its stream (:mod:`speclab.predict.steptrace`: who decoded in it, their
  context, whose prompt was prefilled, and in a speculative run each sequence's draft
  tokens from the proposer replayed over the run's own outputs), fitted as
  ``seq_step_s(decoding sequences) + per_context_token_s * context + [prefill] *
  (prefill_step_s + per_prefill_token_s * prompt tokens) + [speculation] * (overhead_s +
  per_token_s * draft tokens)``, non-negative least squares over thousands of steps. The
  level simulation (:mod:`speclab.predict.levelsim`) prices every simulated step with it, so a
  newcomer's prefill stalls the sequences decoding beside it in both arms, as it does on
  the engine (docs/predictor.md, "The step-level model").
* :class:`CalibratedStepTime`'s steady form, for the formulas that take one batch size
  (break-even, best k, payback, the traffic replay): ``T(B, 1)`` is the baseline's mean
  decode step ``sum(e2e - ttft) / sum(output_tokens - 1)`` per level at its effective
  batch (piecewise-linear in ``B``), and ``T(B, n) - T(B, 1) = overhead_s + per_token_s *
  x ** exponent`` with ``x = B * (n - 1)`` the extra tokens verified in the step: the step
  model's speculative part where there is one, else a fit on one point per level of a
  speculative run (draft tokens from counter deltas, steps from the stream;
  :func:`fit_step_time`).

Why that measurement: vLLM 0.32's synthetic-acceptance mode (``rejection_sample_method
= "synthetic"``) would fix acceptance exactly, but its CPU kernel asserts
``not SYNTHETIC_MODE`` ("Synthetic acceptance not supported with CPU sampling",
``vllm/utils/cpu_triton_utils.py``), so the embedded server cannot use it; a
``draft_model`` run (the target as its own drafter) mixes k drafter passes into every
step; a profile gives kernel times but not the engine's per-step overheads. A real
n-gram run measures exactly what a prediction needs: verification, the proposer, the
rejection sampler, and the scheduling vLLM gives up with n-gram (it disables async
scheduling), with the number of verified tokens known from counters. The fit is done
on calibration prompts and applied to other prompts and other options (suffix, other
k), whose drafts come from :mod:`speclab.predict.replay`.

The seeds' scenario (Kimi-K2.5 on 8 PCIe GPUs) has no server here: :mod:`speclab.moe.seeds`
builds its step time in parts (:mod:`speclab.predict.stepparts`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator

from speclab.errors import SpeclabError

__all__ = [
    "interp_linear",
    "CalibratedStepTime",
    "StepCost",
    "StepTimeModel",
    "VerifyCost",
    "best_k",
    "break_even_acceptance_length",
    "expected_tokens_per_step",
    "fit_step_cost",
    "fit_step_time",
    "leviathan_speedup",
    "predict_speedup",
    "speedup_table",
]


# --------------------------------------------------------------------------- formulas


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Leviathan et al.: E[tokens per step] = (1 - alpha^(k+1)) / (1 - alpha)."""
    if not 0.0 <= alpha <= 1.0:
        raise SpeclabError(f"acceptance alpha must lie in [0, 1]; got {alpha}.")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def leviathan_speedup(alpha: float, k: int, draft_cost_ratio: float = 0.0, verify_cost_ratio: float = 1.0) -> float:
    """Single-stream speedup: E / (k*c + T_verify(k+1)/T_decode) (docs/measurement.md section 7)."""
    return expected_tokens_per_step(alpha, k) / (k * draft_cost_ratio + verify_cost_ratio)


def per_position_rates(alpha: float, k: int) -> list[float]:
    """Unconditional per-position acceptance (vLLM's per-position rates) for i.i.d. alpha."""
    return [alpha ** (i + 1) for i in range(k)]


# --------------------------------------------------------------------------- step time


class StepTimeModel(Protocol):
    """Seconds one engine step takes with ``batch`` sequences each verifying ``tokens``."""

    def step_time_s(self, batch: float, verified_tokens_per_seq: float = 1.0) -> float: ...


def interp_linear(x: float, xs: np.ndarray, ys: np.ndarray) -> float:
    """Piecewise-linear through the points, extended linearly past both ends."""
    if len(xs) == 1:
        return float(ys[0])
    if x <= xs[0]:
        slope = (ys[1] - ys[0]) / (xs[1] - xs[0])
        return float(ys[0] + slope * (x - xs[0]))
    if x >= xs[-1]:
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        return float(ys[-1] + slope * (x - xs[-1]))
    return float(np.interp(x, xs, ys))


class VerifyCost(BaseModel):
    """The extra time of a speculative step:
    ``overhead_s + per_token_s * (max(B + x, knee) - max(B, knee)) ** exponent``, ``B`` the
    sequences in the step, ``x`` its extra verified tokens (all sequences' draft tokens).

    ``knee_tokens``: a step of fewer tokens than this is bound by reading the weights, not by
    arithmetic, so tokens added below it are nearly free; on the 2-core CPU host of
    docs/predictor.md (run 7) an extra token cost 0.4-0.9 ms in a step of one sequence and
    about 2 ms in steps of 4-30 tokens. At the default of 1 the formula is
    ``overhead_s + per_token_s * x ** exponent`` whatever ``B``.
    """

    model_config = ConfigDict(extra="forbid")

    overhead_s: float = Field(0.0, ge=0, description="per step with speculation on (proposer, sampler, scheduling)")
    per_token_s: float = Field(..., ge=0, description="cost of the first extra verified token in a step")
    exponent: float = Field(1.0, gt=0, le=1.5, description="< 1: each further token in a step costs less")
    knee_tokens: float = Field(1.0, ge=1.0, le=4096.0,
                               description="tokens in a step below which an extra token is free (memory-bound)")
    source: str = Field("given", description="where the figures come from (run folders, fit)")

    def priced_tokens(self, extra_tokens: float, batch: float = 1.0) -> float:
        """The step's extra tokens past the knee (what ``per_token_s`` is paid on)."""
        x = max(extra_tokens, 0.0)
        return max(batch + x, self.knee_tokens) - max(batch, self.knee_tokens)

    def extra_s(self, extra_tokens: float, batch: float = 1.0) -> float:
        return self.overhead_s + self.per_token_s * self.priced_tokens(extra_tokens, batch) ** self.exponent

    def token_price_s(self, extra_tokens: float, batch: float = 1.0) -> float:
        """Seconds per draft token of a step verifying ``extra_tokens`` beside ``batch``
        sequences, the per-step overhead left out (NaN for no draft token)."""
        if extra_tokens <= 0:
            return float("nan")
        return (self.extra_s(extra_tokens, batch) - self.overhead_s) / extra_tokens


class StepCost(BaseModel):
    """Seconds one engine step takes, from what is in it (fitted on a run's own steps,
    :func:`fit_step_cost` over :mod:`speclab.predict.steptrace`):

    ``seq_step_s(decoding sequences)`` (piecewise linear through ``seq_knots``)
    ``+ per_context_token_s * context tokens`` (attention reads every sequence's context)
    ``+ [a prefill in the step] * (prefill_step_s + per_prefill_token_s * prompt tokens)``
    ``+ [speculation on] * (speculative.overhead_s + speculative.per_token_s * draft tokens)``.

    Why these terms (docs/predictor.md, "The step-level model"): on the embedded server a
    step's time grows with the context its sequences attend to as much as with their number;
    a newcomer's prefill stalls every sequence decoding beside it (and a speculative arm,
    finishing sooner, lets newcomers in more often per token); a speculative step pays a fixed
    cost (vLLM turns async scheduling off, the proposer runs) and a cost per draft token.
    """

    model_config = ConfigDict(extra="forbid")

    seq_knots: list[float] = Field(..., min_length=1, description="decoding sequences at the curve's knots")
    seq_step_s: list[float] = Field(..., min_length=1, description="step time at each knot, without context or prefill")
    per_context_token_s: float = Field(0.0, ge=0, description="per token of context of every decoding sequence")
    per_prefill_token_s: float = Field(0.0, ge=0, description="per prompt token prefilled in the step")
    prefill_step_s: float = Field(0.0, ge=0, description="a step that carries a prefill, beyond its tokens")
    speculative: VerifyCost = Field(default_factory=lambda: VerifyCost(per_token_s=0.0),
                                    description="what speculation adds to a step (linear in draft tokens)")
    budget_tokens: int = Field(2048, ge=1, description="tokens one step may hold (vLLM max_num_batched_tokens)")
    steps_fitted: int = Field(0, ge=0, description="engine steps the fit saw")
    source: str = "given"

    @field_validator("seq_step_s")
    @classmethod
    def _same_length(cls, value: list[float], info: Any) -> list[float]:
        knots = info.data.get("seq_knots")
        if knots is not None and len(knots) != len(value):
            raise ValueError("seq_step_s needs one value per seq_knots entry")
        return value

    def base_s(self, seqs: float) -> float:
        """The step time of ``seqs`` decoding sequences, no context, no prefill, no speculation."""
        xs, ys = np.asarray(self.seq_knots, float), np.asarray(self.seq_step_s, float)
        return max(interp_linear(seqs, xs, ys), 0.0)

    def seconds(self, seqs: float, context_tokens: float = 0.0, draft_tokens: float = 0.0,
                prefill_tokens: float = 0.0, speculative: bool = False) -> float:
        """One step's time."""
        t = self.base_s(seqs) + self.per_context_token_s * context_tokens
        if prefill_tokens > 0:
            t += self.prefill_step_s + self.per_prefill_token_s * prefill_tokens
        if speculative:
            t += self.speculative.extra_s(draft_tokens, seqs)
        return t


def _hat_basis(values: np.ndarray, knots: np.ndarray) -> np.ndarray:
    """Columns whose weights reproduce linear interpolation through the knots (extended
    linearly past both ends): value(x) = basis(x) @ knot_values."""
    basis = np.zeros((len(values), len(knots)))
    if len(knots) == 1:
        basis[:, 0] = 1.0
        return basis
    left = np.clip(np.searchsorted(knots, values) - 1, 0, len(knots) - 2)
    weight = (values - knots[left]) / (knots[left + 1] - knots[left])
    rows = np.arange(len(values))
    basis[rows, left] = 1.0 - weight
    basis[rows, left + 1] = weight
    return basis


def _seq_knots(seqs: np.ndarray) -> np.ndarray:
    """1, 2, 4, 8, ... up to the largest decoding-sequence count seen, each with steps near it."""
    top = float(seqs.max())
    knots = [1.0]
    while knots[-1] * 2 <= top:
        knots.append(knots[-1] * 2)
    if top > knots[-1] * 1.25:
        knots.append(top)
    return np.array([k for k in knots if ((seqs >= k / 1.5) & (seqs <= k * 1.5)).any()] or [1.0])


# Candidate knees (tokens in a step below which a draft token is nearly free) that the step
# fit tries; the one with the least squared error over the steps wins (docs/predictor.md).
STEP_KNEES = (1.0, 2.0, 3.0, 4.0, 6.0, 8.0)


def _nnls_trimmed(design: np.ndarray, y: np.ndarray, keep: np.ndarray, passes: int) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative least squares, refitted ``passes - 1`` times without the steps more than six
    robust deviations from the previous fit; the coefficients and the steps kept."""
    from scipy.optimize import nnls

    coef = np.zeros(design.shape[1])
    for i in range(passes):
        coef, _ = nnls(design[keep], y[keep])
        if i == passes - 1:
            break
        residual = y - design @ coef
        spread = 1.4826 * float(np.median(np.abs(residual[keep] - np.median(residual[keep]))))
        keep = np.abs(residual) <= 6 * spread if spread > 0 else keep
    return coef, keep


def fit_step_cost(steps: pd.DataFrame, *, source: str = "fit", budget_tokens: int = 2048,
                  knee_tokens: float | None = None) -> StepCost:
    """Fit :class:`StepCost` on engine steps (:func:`speclab.predict.steptrace.run_steps` rows, with a
    ``speculative`` column: True for steps of a speculative run).

    Uses matched steps with at least one decoding sequence and a duration (a step with none
    includes idle engine time). Non-negative least squares over every step, then once more
    without the steps more than six robust deviations from the fit (a hiccup of the host is
    not a property of the engine). With no speculative step the speculative part is zero.

    The draft tokens are priced past a knee (:class:`VerifyCost`): ``knee_tokens`` when given,
    else the one of :data:`STEP_KNEES` whose fit leaves the least squared error on the steps
    the first fit kept (on the 2-core host a step of one sequence verifying four drafts cost
    3 % less than a knee of 1 prices it, while steps of several sequences cost 1-3 % more).
    """
    frame = steps[(steps["decode_seqs"] > 0) & steps["duration_s"].notna() & steps["matched"].astype(bool)]
    if len(frame) < 10:
        raise SpeclabError(f"Only {len(frame)} engine step(s) could be read from the stream; a step-time fit "
                           "needs a run whose records carry chunk_offsets_s (any speclab sweep does).")
    seqs = frame["decode_seqs"].to_numpy(float)
    knots = _seq_knots(seqs)
    spec = frame["speculative"].to_numpy(bool) if "speculative" in frame else np.zeros(len(frame), bool)
    drafts = frame["draft_tokens"].to_numpy(float)
    columns = [_hat_basis(seqs, knots),
               frame["context_tokens"].to_numpy(float)[:, None],
               frame["prefill_tokens"].to_numpy(float)[:, None],
               (frame["prefill_tokens"].to_numpy(float) > 0).astype(float)[:, None]]
    names = [*(f"knot{k:g}" for k in knots), "context", "prefill_tokens", "prefill_step"]
    if spec.any():
        columns += [spec.astype(float)[:, None]]
        names += ["spec_overhead", "draft_token"]
    y = frame["duration_s"].to_numpy(float)

    def design(knee: float) -> np.ndarray:
        if not spec.any():
            return np.hstack(columns)
        priced = (np.maximum(seqs + drafts, knee) - np.maximum(seqs, knee)) * spec
        return np.hstack([*columns, priced[:, None]])

    knee = 1.0 if knee_tokens is None else float(knee_tokens)
    if knee_tokens is None and spec.any():
        _, kept = _nnls_trimmed(design(1.0), y, np.ones(len(y), bool), 2)

        def error(candidate: float) -> float:
            matrix = design(candidate)
            coef, _ = _nnls_trimmed(matrix, y, kept, 1)
            return float(((y - matrix @ coef)[kept] ** 2).sum())

        knee = min(STEP_KNEES, key=error)
    coef, keep = _nnls_trimmed(design(knee), y, np.ones(len(y), bool), 2)
    values = dict(zip(names, coef.tolist(), strict=True))
    return StepCost(
        seq_knots=knots.tolist(), seq_step_s=[values[f"knot{k:g}"] for k in knots],
        per_context_token_s=values["context"], per_prefill_token_s=values["prefill_tokens"],
        prefill_step_s=values["prefill_step"],
        speculative=VerifyCost(overhead_s=values.get("spec_overhead", 0.0), per_token_s=values.get("draft_token", 0.0),
                               knee_tokens=knee, source=source),
        budget_tokens=budget_tokens, steps_fitted=int(keep.sum()), source=source)


@dataclass
class CalibratedStepTime:
    """T(B, n) from a baseline sweep plus a measured verify cost (module docstring).

    ``baseline``: columns ``batch`` and ``step_s`` (one row per measured level).
    """

    baseline: pd.DataFrame
    verify: VerifyCost
    points: pd.DataFrame | None = None  # the speculative calibration points, if fitted
    notes: list[str] = field(default_factory=list)
    # the notes that say a source fell back to a weaker one (a report shows them as caveats)
    fallbacks: list[str] = field(default_factory=list)
    # The engine-step model (fitted on the stream's steps) and the steps it was fitted on;
    # when set, ``verify`` is its speculative part and the level simulation prices each step.
    steps: StepCost | None = None
    step_data: pd.DataFrame | None = None
    # Sources other than a fitted calibration run: resamples of the verify cost for the
    # interval (the probe's repeats, the baseline's levels, or the stated spread of given
    # figures), and the range of what running in speculative mode costs per step, which no
    # probe sees (None: measured, inside ``verify.overhead_s``, as calibrate does).
    verify_draws: list[VerifyCost] | None = None
    spec_mode_overhead_s: tuple[float, float] | None = None
    origin: str = ""  # probe | calibrate | baseline_slope | explicit: how the verify cost is known
    # Speculative mode's own cost as a speculative run of this server measured it, per
    # concurrency (speclab.predict.ownsteps, after a restart), in place of the stated range
    # where it has the concurrency; ``spec_mode_overhead_origin`` names the run.
    spec_mode_overhead_by_concurrency: dict[int, tuple[float, float]] | None = None
    spec_mode_overhead_origin: str = ""
    # Speculative mode's own cost in labelled parts (speclab.predict.modecost), per method and
    # concurrency: each part a dict of name, low_ms, high_ms, label and source. Used where no
    # range was given (``spec_mode_overhead_s``) and no speculative run measured it.
    mode_costs: dict[str, dict[int, list[dict[str, Any]]]] = field(default_factory=dict)
    # One server instance's speed against another's (a log-normal sd) and where it comes from;
    # None: the caller's default.
    instance_sd: float | None = None
    instance_sd_source: str = ""

    def mode_cost_parts(self, method: str | None, concurrency: int) -> list[dict[str, Any]]:
        """The labelled parts of speculative mode's cost for ``method`` at the nearest measured
        concurrency (none where the model holds no parts for the method)."""
        by_c = self.mode_costs.get(str(method)) if method else None
        if not by_c:
            return []
        nearest = min(by_c, key=lambda c: (abs(math.log(max(c, 1) / max(concurrency, 1))), c))
        return by_c[nearest]

    def mode_cost_split(self, method: str | None, concurrency: int) -> tuple[float, float]:
        """The part of speculative mode's cost that is a measured estimate, as (mean, sd) in
        seconds: parts carrying a standard error (``se_ms``) are drawn from a normal in each
        resample of the interval, not stacked end to end; (0, 0) where none does."""
        measured = [p for p in self.mode_cost_parts(method, concurrency) if p.get("se_ms") is not None]
        mean = sum((float(p["low_ms"]) + float(p["high_ms"])) / 2.0 for p in measured) / 1e3
        sd = math.sqrt(sum(float(p["se_ms"]) ** 2 for p in measured)) / 1e3
        return mean, sd

    def spec_mode_overhead_for(self, concurrency: int, method: str | None = None) -> tuple[tuple[float, float] | None, str]:
        """Speculative mode's own cost for one concurrency (a range in seconds) and where it comes
        from: measured by an earlier speculative run where it has the concurrency; else the range
        given; else the sum of ``method``'s labelled parts; else None (a calibrated model, whose
        fit measured its own)."""
        has_range = self.spec_mode_overhead_s is not None or bool(self.mode_costs)
        measured = (self.spec_mode_overhead_by_concurrency or {}).get(int(concurrency))
        if measured is not None and has_range:  # calibrate's fit holds its own
            return measured, f"measured in {self.spec_mode_overhead_origin}"
        if self.spec_mode_overhead_s is not None:
            return self.spec_mode_overhead_s, "assumed"
        parts = self.mode_cost_parts(method, concurrency)
        if parts:
            return (sum(float(p["low_ms"]) for p in parts) / 1e3, sum(float(p["high_ms"]) for p in parts) / 1e3), "parts"
        return None, "assumed"

    def __post_init__(self) -> None:
        frame = self.baseline.groupby("batch", as_index=False)["step_s"].mean().sort_values("batch")
        if frame.empty:
            raise SpeclabError("A step-time model needs at least one baseline level (batch, step_s).")
        self._xs = frame["batch"].to_numpy(float)
        self._ys = frame["step_s"].to_numpy(float)

    def baseline_step_s(self, batch: float) -> float:
        """T(B, 1): interpolated between measured levels; never below the fastest level's 10 %."""
        return max(interp_linear(batch, self._xs, self._ys), 0.1 * float(self._ys.min()))

    def extra_s(self, batch: float, verified_tokens_per_seq: float) -> float:
        """T(B, n) - T(B, 1) for a speculative step."""
        return self.verify.extra_s(batch * max(verified_tokens_per_seq - 1.0, 0.0), batch)

    def step_time_s(self, batch: float, verified_tokens_per_seq: float = 1.0, speculative: bool | None = None) -> float:
        """T(B, n); speculative steps (n > 1, or ``speculative=True``) add the verify cost."""
        base = self.baseline_step_s(batch)
        spec = verified_tokens_per_seq > 1.0 if speculative is None else speculative
        return base + self.extra_s(batch, verified_tokens_per_seq) if spec else base

    def step_seconds(self, seqs: float, context_tokens: float = 0.0, draft_tokens: float = 0.0,
                     prefill_tokens: float = 0.0, speculative: bool = False) -> float:
        """One engine step's time: :class:`StepCost` where fitted; else the baseline curve at
        ``seqs`` plus the verify cost of ``draft_tokens`` (no context or prefill terms)."""
        if self.steps is not None:
            return self.steps.seconds(seqs, context_tokens, draft_tokens, prefill_tokens, speculative)
        base = self.baseline_step_s(seqs)
        return base + self.verify.extra_s(draft_tokens, seqs) if speculative else base

    @property
    def budget_tokens(self) -> int:
        return self.steps.budget_tokens if self.steps is not None else 2048

    def describe(self) -> dict[str, Any]:
        """The model's figures, for a notebook table."""
        slope = None
        if len(self._xs) > 1:
            slope = float(np.polyfit(self._xs, self._ys, 1)[0])
        return {
            "baseline_batches": self._xs.tolist(),
            "baseline_step_ms": (self._ys * 1e3).round(3).tolist(),
            "overhead_ms": self.verify.overhead_s * 1e3,
            "per_verified_token_ms": self.verify.per_token_s * 1e3,
            "exponent": self.verify.exponent,
            "knee_tokens": self.verify.knee_tokens,
            "extra_ms_at_1_4_16_tokens": [round(self.verify.extra_s(x) * 1e3, 3) for x in (1, 4, 16)],
            "baseline_per_token_ms": slope * 1e3 if slope is not None else None,
            "source": self.verify.source,
            "spec_mode_overhead_ms": (None if self.spec_mode_overhead_s is None
                                      else [round(v * 1e3, 3) for v in self.spec_mode_overhead_s]),
            "mode_cost": {method: {str(c): parts for c, parts in by_c.items()}
                          for method, by_c in self.mode_costs.items()},
            "instance_sd": self.instance_sd, "instance_sd_source": self.instance_sd_source,
            "notes": list(self.notes),
            "fallbacks": list(self.fallbacks),
            "step_model": None if self.steps is None else {
                "step_ms_by_decoding_sequences": {f"{k:g}": round(v * 1e3, 3)
                                                  for k, v in zip(self.steps.seq_knots, self.steps.seq_step_s,
                                                                  strict=True)},
                "per_1k_context_tokens_ms": self.steps.per_context_token_s * 1e6,
                "prefill_step_ms": self.steps.prefill_step_s * 1e3,
                "per_prefill_token_ms": self.steps.per_prefill_token_s * 1e3,
                "steps_fitted": self.steps.steps_fitted,
            },
        }


# Knees searched by fit_step_time: tokens in one step (sequences plus their draft tokens).
KNEE_GRID: tuple[float, ...] = (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0)


def level_point_extras(points: pd.DataFrame, verify: VerifyCost | None = None) -> pd.DataFrame:
    """Calibration level points with ``extra_tokens`` (draft tokens per step) and ``extra_s``
    (the speculative step over the baseline's); with ``verify``, also what it prices them at
    (``fitted_extra_s``) and the ``residual_ms``."""
    points = points.copy()
    points["extra_tokens"] = points["batch"] * (points["verified_tokens_per_seq"] - 1.0).clip(lower=0.0)
    points["extra_s"] = points["step_s"] - points["baseline_step_s"]
    if verify is not None:
        points["fitted_extra_s"] = [verify.extra_s(x, b) for x, b in zip(points["extra_tokens"], points["batch"],
                                                                         strict=True)]
        points["residual_ms"] = (points["extra_s"] - points["fitted_extra_s"]) * 1e3
    return points


def fit_step_time(
    baseline: pd.DataFrame,
    spec_points: pd.DataFrame | None = None,
    *,
    source: str = "fit",
    fit_overhead: bool = True,
    exponent: float | None = None,
    knee_tokens: float | None = 1.0,
    knees: Sequence[float] | None = None,
) -> CalibratedStepTime:
    """Calibrate :class:`CalibratedStepTime` from measurements.

    ``baseline``: ``batch``, ``step_s`` per baseline level. ``spec_points``: ``batch``,
    ``verified_tokens_per_seq``, ``step_s`` per speculative level (optionally
    ``baseline_step_s``, the same level's baseline step time on the same prompts; else the
    baseline curve at that batch is used). Fits ``step_s - baseline_step_s =
    overhead_s + per_token_s * x ** exponent`` (``x`` = extra verified tokens per step =
    ``batch * (verified_tokens_per_seq - 1)``) with non-negative coefficients; the exponent
    is searched in [0.5, 1] (least squares) when ``exponent`` is None and there are four or
    more points, else it is ``exponent`` (default 1, linear). The knee (tokens in a step below
    which an extra token is nearly free, :class:`VerifyCost`) is ``knee_tokens`` (default 1:
    none); ``knee_tokens=None`` searches it over :data:`KNEE_GRID` when there are six or more
    points. Not the default: on a disturbed host the noisy one-sequence levels pulled the knee
    to 6 tokens and lost 7 cells of 42, where a quiet host's knee of 3.5 won 4
    (docs/predictor.md, runs 7 and 9).
    With a ``steps`` column each
    point is weighted by the square root of its steps (a level's mean step time is that much
    less noisy). On this project's CPU the
    marginal token gets cheaper as more share a step (exponent ~0.8), visible only when
    the calibration spans the batch sizes predicted: calibrate at those concurrencies.
    Without spec points, the baseline's own slope (seconds per extra sequence-token)
    stands in for ``per_token_s`` and ``overhead_s`` is 0 (flagged in notes).
    """
    from scipy.optimize import nnls

    model = CalibratedStepTime(baseline, VerifyCost(per_token_s=0.0, source=source))
    if spec_points is None or spec_points.empty:
        xs, ys = model._xs, model._ys
        if len(xs) < 2:
            raise SpeclabError("Without a speculative calibration run, the baseline needs two or more levels.")
        slope = max(float(np.polyfit(xs, ys, 1)[0]), 0.0)
        model.verify = VerifyCost(per_token_s=slope, overhead_s=0.0, source=f"{source}: baseline slope (assumed)")
        model.notes.append("verify cost ASSUMED equal to the baseline's per-sequence slope; calibrate it")
        return model
    points = spec_points.copy()
    if "baseline_step_s" not in points:
        points["baseline_step_s"] = [model.baseline_step_s(b) for b in points["batch"]]
    points = level_point_extras(points)
    x = points["extra_tokens"].to_numpy(float)
    b = points["batch"].to_numpy(float)
    y = points["extra_s"].to_numpy(float)
    # A level's step time is a mean over its steps: its noise shrinks as 1/sqrt(steps), so a
    # level of two requests must not pull the fit as hard as one of fourteen.
    weight = np.sqrt(points["steps"].to_numpy(float)) if "steps" in points else np.ones(len(x))
    if exponent is not None:
        candidates = [float(exponent)]
    elif len(points) >= 4:
        candidates = [round(b, 2) for b in np.arange(0.5, 1.0001, 0.05)]
    else:
        candidates = [1.0]
    if knee_tokens is not None:
        knees = [float(knee_tokens)]
    else:
        knees = list(knees or KNEE_GRID) if len(points) >= 6 else [1.0]
    best: tuple[float, float, float, float, float] | None = None
    for knee in knees:
        priced = np.maximum(b + x, knee) - np.maximum(b, knee)
        # Two shapes, not their product: a knee (free tokens, then a steady price: the
        # roofline) or a bend (each further token cheaper); both at once overfit ten points.
        for beta in (candidates if knee == 1.0 or exponent is not None else [1.0]):
            columns = ([np.ones(len(x))] if fit_overhead else []) + [priced**beta]
            coef, residual = nnls(np.column_stack(columns) * weight[:, None], y * weight)
            overhead, per_token = (coef[0], coef[1]) if fit_overhead else (0.0, coef[0])
            # a knee or a bend must buy a clearly better fit (1 %) before it is taken
            if best is None or residual < best[0] * 0.99:
                best = (residual, beta, float(overhead), float(per_token), knee)
    assert best is not None
    _, beta, overhead, per_token, knee = best
    model.verify = VerifyCost(overhead_s=overhead, per_token_s=per_token, exponent=beta, knee_tokens=knee,
                              source=source)
    model.points = level_point_extras(points, model.verify)
    if len(points) < 3:
        model.notes.append(f"verify cost fitted on {len(points)} point(s) only")
    return model


# --------------------------------------------------------------------------- predictions


def predict_speedup(
    model: StepTimeModel,
    batch: float,
    tokens_per_step: float,
    verified_tokens_per_seq: float,
    draft_s: float = 0.0,
) -> dict[str, float]:
    """Step times, tok/s and speedup at one batch size.

    ``tokens_per_step``: tokens emitted per sequence per step (1 + accepted per step);
    ``verified_tokens_per_seq``: 1 + draft tokens per step; ``draft_s``: drafting time per
    step not already in the model (a drafter model's forward passes).
    """
    base = model.step_time_s(batch, 1.0)
    spec = model.step_time_s(batch, verified_tokens_per_seq) + draft_s
    return {
        "batch": batch,
        "baseline_step_s": base,
        "spec_step_s": spec,
        "verify_cost_ratio": spec / base,
        "tokens_per_step": tokens_per_step,
        "baseline_tok_s": batch / base,
        "spec_tok_s": batch * tokens_per_step / spec,
        "speedup": tokens_per_step * base / spec,
    }


def break_even_acceptance_length(
    model: StepTimeModel, batch: float, k: float, draft_fraction: float = 1.0, draft_s: float = 0.0
) -> float:
    """vLLM's mean acceptance length (1 + accepted per draft) at which speculation breaks even.

    With drafts on a fraction ``f`` of steps, each ``k`` long: tokens per step =
    1 + f * (L - 1) must equal T(B, 1 + f*k) / T(B, 1). Above ``k + 1`` it cannot pay.
    """
    if draft_fraction <= 0:
        return math.nan
    base = model.step_time_s(batch, 1.0)
    spec = model.step_time_s(batch, 1.0 + draft_fraction * k) + draft_s
    return 1.0 + (spec / base - 1.0) / draft_fraction


def best_k(
    model: StepTimeModel,
    batch: float,
    acceptance: Callable[[int], tuple[float, float]] | float,
    ks: Sequence[int] = range(1, 9),
    draft_s_per_token: float = 0.0,
) -> pd.DataFrame:
    """Predicted speedup for each k; the row with ``best`` True wins.

    ``acceptance``: a per-token alpha (Leviathan: every step drafts k tokens), or a
    function k -> (tokens_per_step, verified_tokens_per_seq), e.g. from a replay at that k.
    """
    rows = []
    for k in ks:
        if callable(acceptance):
            tokens, verified = acceptance(k)
        else:
            tokens, verified = expected_tokens_per_step(acceptance, k), 1.0 + k
        row = predict_speedup(model, batch, tokens, verified, draft_s=draft_s_per_token * k)
        rows.append({"k": k, **row})
    frame = pd.DataFrame(rows)
    frame["best"] = frame["speedup"] == frame["speedup"].max()
    return frame


def speedup_table(
    model: StepTimeModel,
    batches: Sequence[float],
    alpha: float,
    k: int,
    draft_fraction: float = 1.0,
    draft_s: float = 0.0,
) -> pd.DataFrame:
    """Predicted tok/s and speedup per batch for an i.i.d. acceptance alpha, plus break-even."""
    drafted = expected_tokens_per_step(alpha, k)
    tokens = 1.0 + draft_fraction * (drafted - 1.0)
    verified = 1.0 + draft_fraction * k
    rows = []
    for batch in batches:
        row = predict_speedup(model, batch, tokens, verified, draft_s)
        row["break_even_acceptance_length"] = break_even_acceptance_length(model, batch, k, draft_fraction, draft_s)
        rows.append(row)
    frame = pd.DataFrame(rows).rename(columns={"batch": "concurrency"})
    frame.insert(1, "k", k)
    frame.insert(2, "alpha", alpha)
    frame.insert(3, "mean_acceptance_length", drafted)
    return frame


# --------------------------------------------------------------------------- payback
