"""The verify part of the step model, fitted from the live probe's points (no restart).

The probe (:mod:`speclab.measure.probe`) times engine steps of B sequences each extending a
cached prefix by n real tokens. Their growth with n is what verifying n - 1 draft tokens per
sequence adds to a step: ``T(B, n) - T(B, 1)``, fitted here in the form every prediction
prices steps with (:class:`speclab.predict.costmodel.VerifyCost`: a cost per extra token past
a knee, the knee searched up to GPU sizes of hundreds of tokens).

What the probe cannot see, added here:

- **Logits for every verified position.** A prefill computes logits for its last position
  only; a verification step computes them for all k + 1 positions, B x n rows of the LM head
  where a decode step computes B. Measured where the server allows it
  (:func:`speclab.measure.probe.run_head_probe`, vLLM): :func:`head_curve` turns its pairs into
  the cost of R rows, and every probe point gains ``H(B x n) - H(B)`` before the fit, so the
  head's own regime shows (on a CPU in float32 a few extra rows cost almost nothing beside the
  weight read one row already pays). Otherwise the head's share of a token's arithmetic is read
  from the model's config (:func:`lm_head_ratio`): 27 % of the rest for SmolLM2-135M
  (vocabulary 49,152 against 30 small layers), about 4 % for Kimi-K2.5's active parameters;
  that share assumes every row costs its arithmetic, which overprices a memory-bound head.
- The rejection sampler: greedy verification takes an argmax per verified row, a vocabulary-
  sized pass against the LM head's hidden x vocabulary GEMM per row; left out (under 0.2 %).
- The engine's own cost of running in speculative mode (the proposer, async scheduling off,
  CUDA-graph mode): no probe sees it; predictions carry it as a named range
  (``spec_mode_overhead_ms``), never as a hidden zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from speclab.errors import SpeclabError
from speclab.predict.costmodel import VerifyCost, fit_step_time

# Tokens in a step below which an extra token is nearly free: a CPU reaches its roofline at a
# few tokens, a GPU at hundreds (the H200 step curves of docs/moe.md); searched, never assumed.
PROBE_KNEES: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0)


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    inner = config.get("text_config")
    return inner if isinstance(inner, Mapping) else config


def lm_head_ratio(config: Mapping[str, Any]) -> float | None:
    """The LM head's multiply-adds per token over those of the layers below it (active
    parameters only: a MoE counts its routed and shared experts per token), from a Hugging
    Face ``config.json``; None when the config lacks the shape."""
    c = _text_config(config)
    try:
        hidden, vocab, layers = int(c["hidden_size"]), int(c["vocab_size"]), int(c["num_hidden_layers"])
    except (KeyError, TypeError, ValueError):
        return None
    heads = int(c.get("num_attention_heads") or 1)
    kv_heads = int(c.get("num_key_value_heads") or heads)
    head_dim = int(c.get("head_dim") or hidden // heads)
    if c.get("kv_lora_rank"):  # multi-head latent attention (DeepSeek-V3, Kimi)
        rope, nope = int(c.get("qk_rope_head_dim") or 64), int(c.get("qk_nope_head_dim") or 128)
        v_dim, kv_rank = int(c.get("v_head_dim") or 128), int(c["kv_lora_rank"])
        q_rank = int(c.get("q_lora_rank") or 0)
        q = hidden * q_rank + q_rank * heads * (nope + rope) if q_rank else hidden * heads * (nope + rope)
        attention = q + hidden * (kv_rank + rope) + kv_rank * heads * (nope + v_dim) + heads * v_dim * hidden
    else:
        attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    dense_ffn = 3 * hidden * int(c.get("intermediate_size") or 4 * hidden)
    experts = int(c.get("n_routed_experts") or c.get("num_experts") or c.get("num_local_experts") or 0)
    if experts:
        per_token = int(c.get("num_experts_per_tok") or 1) + int(c.get("n_shared_experts") or 0)
        moe_ffn = 3 * hidden * int(c.get("moe_intermediate_size") or c.get("intermediate_size") or hidden) * per_token
        dense_layers = int(c.get("first_k_dense_replace") or 0)
        body = layers * attention + dense_layers * dense_ffn + (layers - dense_layers) * moe_ffn
    else:
        body = layers * (attention + dense_ffn)
    return hidden * vocab / body if body > 0 else None


# The head curve needs this many row sizes with a usable pair (a line needs two; a third
# shows its shape).
HEAD_MIN_SIZES = 3


@dataclass(frozen=True)
class HeadCurve:
    """What R rows of LM-head logits cost, from the head probe's pairs: the median difference
    per size, made non-decreasing (more rows never cost less; noise can say so), zero at
    R = 0, interpolated between sizes and extended past the largest by the last segment's slope,
    or by the mean slope from R = 0 where noise flattened the last segment (past hundreds of rows
    a head is bound by its arithmetic, which grows with every row)."""

    rows: tuple[float, ...]
    cost_s: tuple[float, ...]
    pairs: int

    def __call__(self, rows: float) -> float:
        xs = np.array((0.0, *self.rows))
        ys = np.array((0.0, *self.cost_s))
        if rows <= xs[-1]:
            return float(np.interp(rows, xs, ys))
        slope = max((ys[-1] - ys[-2]) / (xs[-1] - xs[-2]), ys[-1] / xs[-1])
        return float(ys[-1] + slope * (rows - xs[-1]))

    def extra_s(self, batch: float, tokens: float) -> float:
        """A step of ``batch`` sequences verifying ``tokens`` each, beside a decode step of ``batch``."""
        return max(0.0, self(batch * tokens) - self(batch))

    def table(self) -> pd.DataFrame:
        return pd.DataFrame({"rows": self.rows, "head_ms": [c * 1e3 for c in self.cost_s]})


def head_curve(points: Sequence[Any]) -> HeadCurve | None:
    """The curve from usable head pairs, or None with fewer than :data:`HEAD_MIN_SIZES` sizes."""
    frame = pd.DataFrame([{"rows": p.rows, "extra_s": p.extra_s} for p in points if p.extra_s is not None])
    if frame.empty or frame["rows"].nunique() < HEAD_MIN_SIZES:
        return None
    medians = frame.groupby("rows")["extra_s"].median().sort_index()
    cost = np.maximum.accumulate(np.clip(medians.to_numpy(float), 0.0, None))
    return HeadCurve(tuple(float(r) for r in medians.index), tuple(float(c) for c in cost), len(frame))


@dataclass
class ProbeFit:
    """The probe's verify cost (head term included, no per-step overhead), how it was made,
    and bootstrap draws of it for the prediction interval. ``head`` is the measured head curve
    (None: the config's share, ``head_ratio``, priced the head instead)."""

    verify: VerifyCost
    raw_per_token_s: float
    head_ratio: float | None
    table: pd.DataFrame
    draws: list[VerifyCost] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    head: HeadCurve | None = None

    def per_token_ms(self, batch: float, draft_tokens_per_seq: float) -> float:
        """Milliseconds per draft token of a step of ``batch`` sequences drafting that many each."""
        extra = batch * draft_tokens_per_seq
        return self.verify.extra_s(extra, batch) / extra * 1e3 if extra > 0 else 0.0


def probe_table(points: Sequence[Any]) -> pd.DataFrame:
    """Per (batch, tokens): the median step of the usable repeats, their spread, the context."""
    rows = [{"batch": p.batch, "tokens": p.tokens, "repeat": p.repeat, "step_s": p.step_s,
             "context_tokens_mean": p.context_tokens_mean} for p in points if p.ok and p.step_s]
    if not rows:
        raise SpeclabError("The probe left no usable point (every one was refused); see its refusals.")
    frame = pd.DataFrame(rows)
    return frame.groupby(["batch", "tokens"], as_index=False).agg(
        step_s=("step_s", "median"), step_s_min=("step_s", "min"), step_s_max=("step_s", "max"),
        repeats=("step_s", "size"), context_tokens_mean=("context_tokens_mean", "mean"))


def _points(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The fit's baseline (one token per sequence) and its speculative points (n > 1), per batch."""
    base = table[table["tokens"] == 1][["batch", "step_s"]]
    if base.empty:
        raise SpeclabError("The probe has no one-token point to measure the others against.")
    joined = table[table["tokens"] > 1].merge(base.rename(columns={"step_s": "baseline_step_s"}), on="batch")
    spec = joined.rename(columns={"tokens": "verified_tokens_per_seq", "repeats": "steps"})[
        ["batch", "verified_tokens_per_seq", "step_s", "baseline_step_s", "steps"]]
    if spec.empty:
        raise SpeclabError("The probe has no point of two or more tokens per sequence to fit.")
    return base, spec


def _with_head(points: Sequence[Any], head: HeadCurve) -> list[Any]:
    """The probe's points as verification steps: each step plus the head rows it did not compute."""
    return [replace(p, step_s=p.step_s + head.extra_s(p.batch, p.tokens)) if p.ok and p.step_s else p
            for p in points]


def fit_probe(points: Sequence[Any], config: Mapping[str, Any] | None = None, *, draws: int = 200,
              seed: int = 0, head_points: Sequence[Any] = ()) -> ProbeFit:
    """Fit the verify cost on the probe's usable points plus the LM-head term: measured from
    ``head_points`` where they make a curve, else the share read from ``config``."""

    def fit(chosen: Sequence[Any]) -> Any:
        return fit_step_time(*_points(probe_table(chosen)), source="probe", fit_overhead=False,
                             knee_tokens=None, knees=PROBE_KNEES)

    unpriced = fit(points)
    raw = unpriced.verify
    head = head_curve(head_points)
    ratio: float | None = None
    if head is not None:  # the head rows measured: the points become verification steps
        priced = _with_head(points, head)
        fitted = fit(priced)
        notes = list(fitted.notes)
        verify = fitted.verify.model_copy(update={"source": "probe (+LM head measured)"})
        drawn = _draws(priced, fitted.verify, 1.0, draws, seed)
    else:
        notes = list(unpriced.notes)
        ratio = lm_head_ratio(config) if config else None
        if ratio is None:
            notes.append("no model config: the LM head's logits for every verified position are not priced")
        elif head_points:
            notes.append(f"the head probe made no curve ({len(head_points)} pairs, fewer than {HEAD_MIN_SIZES} "
                         f"sizes usable): the LM head is priced from the config's share (+{ratio:.0%}), assumed")
        scale = 1.0 + (ratio or 0.0)
        verify = raw.model_copy(update={"per_token_s": raw.per_token_s * scale,
                                        "source": "probe" + (f" (+{ratio:.0%} LM head)" if ratio else "")})
        drawn = _draws(points, raw, scale, draws, seed)
    table = probe_table(priced if head is not None else points)  # the steps the verify cost was fitted to
    base, _ = _points(table)
    one = dict(zip(base["batch"], base["step_s"], strict=True))
    table = table.assign(fitted_step_s=[one[b] + verify.extra_s(b * (n - 1), b) if b in one else None
                                        for b, n in zip(table["batch"], table["tokens"], strict=True)])
    return ProbeFit(verify, raw.per_token_s, ratio, table, drawn, notes, head)


def _draws(points: Sequence[Any], raw: VerifyCost, scale: float, n: int, seed: int) -> list[VerifyCost]:
    """The verify cost refitted on ``n`` resamples of each point's repeats (knee and exponent
    kept): the calibration term of the prediction interval."""
    rows = pd.DataFrame([{"batch": p.batch, "tokens": p.tokens, "step_s": p.step_s}
                         for p in points if p.ok and p.step_s])
    groups = [g["step_s"].to_numpy(float) for _, g in rows.groupby(["batch", "tokens"])]
    keys = [k for k, _ in rows.groupby(["batch", "tokens"])]
    if all(len(g) < 2 for g in groups):
        return [raw.model_copy(update={"per_token_s": raw.per_token_s * scale})] * n
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        medians = [float(np.median(g[rng.integers(0, len(g), len(g))])) for g in groups]
        table = pd.DataFrame([{"batch": b, "tokens": t, "step_s": m, "repeats": 1}
                              for (b, t), m in zip(keys, medians, strict=True)])
        base, spec = _points(table)
        refit = fit_step_time(base, spec, source="probe draw", fit_overhead=False, exponent=raw.exponent,
                              knee_tokens=raw.knee_tokens).verify
        out.append(refit.model_copy(update={"per_token_s": refit.per_token_s * scale}))
    return out
