"""A run folder's decode timings and engine steps, read back for the step model and predictions.

* :func:`level_timings`: per level (and category) decode time, TPOT and the effective batch;
  :func:`baseline_curve`: a run's step time against its batch.
* :func:`calibration_steps`: engine steps read from a run's streams (speculative runs matched
  with their replayed drafts); :func:`spec_level_points`: one point per speculative level from
  the server's counter deltas.
* :func:`run_option`, :func:`served_dtype`, :func:`max_model_len`, :func:`load_time_s`: what a
  run's manifest says it ran.

Speedup is per stream, from decode time: ``TPOT_baseline / TPOT_spec`` with
``TPOT = sum(e2e - ttft) / sum(output_tokens - 1)`` over a group's requests (TTFT is
prefill, which speculation does not change). Analysis layer: reads run folders only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from speclab.errors import SpeclabError
from speclab.options import SpecOption
from speclab.predict.replay import ReplayResult, baseline_requests, replay_option
from speclab.predict.steptrace import CLIENT_STALL_TOLERANCE_S, StepPlan, run_steps
from speclab.runfolder import MANIFEST, iter_levels, read_records
from speclab.runs import read_json

__all__ = [
    "baseline_curve",
    "calibration_steps",
    "decode_requests",
    "level_timings",
    "load_time_s",
    "max_model_len",
    "pool",
    "run_option",
    "served_dtype",
    "spec_level_points",
    "step_plans",
    "summary_levels",
]


def decode_requests(run_dir: str | Path) -> pd.DataFrame:
    """A run's successful requests with decode time, decode tokens and decode chunks."""
    frame = pd.DataFrame(read_records(run_dir))
    if frame.empty:
        raise SpeclabError(f"{run_dir} holds no requests; choose a finished run folder.")
    frame = frame[frame["ok"].fillna(False).astype(bool)].copy()
    frame["decode_s"] = frame["e2e_s"] - frame["ttft_s"]
    frame["decode_tokens"] = frame["output_tokens"] - 1
    frame["chunk_steps"] = [_decode_chunks(c) for c in frame.get("chunk_tokens", pd.Series([None] * len(frame)))]
    return frame[frame["decode_tokens"] > 0]


def _decode_chunks(chunk_tokens: Any) -> float:
    """Streamed chunks carrying tokens after the first: one per engine step the request took
    (fewer only where the server merged chunks for a slow reader); NaN when not recorded."""
    if chunk_tokens is None or (isinstance(chunk_tokens, float) and math.isnan(chunk_tokens)):
        return math.nan
    return float(sum(1 for n in chunk_tokens if n) - 1)


def _union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    order = np.argsort(starts)
    total, cur_start, cur_end = 0.0, None, None
    for s, e in zip(starts[order], ends[order], strict=True):
        if cur_end is None or s > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = s, e
        else:
            cur_end = max(cur_end, e)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def _effective_batch(group: pd.DataFrame) -> float:
    """Mean number of requests decoding while any is (time-weighted)."""
    starts = (group["send_time_s"] + group["ttft_s"]).to_numpy(float)
    ends = (group["send_time_s"] + group["e2e_s"]).to_numpy(float)
    span = _union_length(starts, ends)
    return float(group["decode_s"].sum() / span) if span > 0 else 1.0


def level_timings(run_dir: str | Path, by_category: bool = False) -> pd.DataFrame:
    """Per level (and category): requests, decode time, TPOT and the effective batch.

    ``tpot_s`` = sum(e2e - ttft) / sum(output_tokens - 1): the decode step time of a
    baseline run, the per-token time of a speculative one. ``batch`` is the level's
    effective batch (requests decoding at once, time-weighted), the same for every
    category of a level.
    """
    frame = decode_requests(run_dir)
    rows = []
    for (level, concurrency), group in frame.groupby(["level", "concurrency"], sort=True):
        batch = _effective_batch(group)
        parts = group.groupby("category") if by_category else [("all", group)]
        for category, part in parts:
            rows.append({
                "level": int(level), "concurrency": int(concurrency), "category": category,
                "requests": len(part), "output_tokens": int(part["output_tokens"].sum()),
                "decode_tokens": int(part["decode_tokens"].sum()), "decode_s": float(part["decode_s"].sum()),
                "tpot_s": float(part["decode_s"].sum() / part["decode_tokens"].sum()),
                "batch": batch,
                "chunk_steps": float(part["chunk_steps"].sum(min_count=len(part))),
            })
    return pd.DataFrame(rows)


def summary_levels(run_dir: str | Path) -> dict[int, dict[str, Any]]:
    """Level number -> the level's object in summary.json."""
    return {int(lv["level"]): lv for lv in iter_levels(run_dir)}


def run_option(run_dir: str | Path) -> SpecOption:
    """The speculative option a run was made with (its manifest's params)."""
    manifest = read_json(Path(run_dir) / MANIFEST)
    params = manifest.get("params") or {}
    option = dict(manifest.get("option") or (params.get("target") or {}).get("option") or params.get("option") or {})
    served = (manifest.get("server") or {}).get("speculative_config")
    if not option and isinstance(served, dict) and served.get("method"):
        # what the server itself said it ran (vLLM's /server_info)
        known = {"method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"}
        option = {key: value for key, value in served.items() if key in known and value is not None}
    if not option:
        raise SpeclabError(f"{run_dir}'s manifest names no option; pass the SpecOption explicitly.")
    if "<redacted>" in option.values():
        # Older manifests redacted 'num_speculative_tokens'; the launch command keeps it.
        server = manifest.get("server") or {}
        argv = server.get("cmdline") or []
        launched = {}
        if "--speculative-config" in argv:
            launched = json.loads(argv[argv.index("--speculative-config") + 1])
        for key, value in list(option.items()):
            if value == "<redacted>":
                option[key] = launched.get(key, server.get("spec_positions") if key == "num_speculative_tokens" else None)
    return SpecOption(**option)


def load_time_s(run_dir: str | Path) -> float | None:
    """How long the run's server took to start, when speclab started it."""
    server = read_json(Path(run_dir) / MANIFEST).get("server") or {}
    value = server.get("load_time_s")
    return float(value) if value else None


def pool(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Pool timing rows over repeats: decode time and tokens summed, batch averaged."""
    agg = frame.groupby(keys, as_index=False).agg(
        requests=("requests", "sum"), decode_s=("decode_s", "sum"),
        decode_tokens=("decode_tokens", "sum"), batch=("batch", "mean"))
    agg["tpot_s"] = agg["decode_s"] / agg["decode_tokens"]
    return agg


def baseline_curve(timing: pd.DataFrame) -> Callable[[float], float]:
    """T(B, 1) of a run: its decode step time against effective batch (levels pooled per
    concurrency), linear between measured batches and flat past the ends."""
    pooled = pool(timing, ["concurrency"]).sort_values("batch")
    xs, ys = pooled["batch"].to_numpy(float), pooled["tpot_s"].to_numpy(float)
    return lambda batch: float(np.interp(batch, xs, ys))


def spec_level_points(baseline_run_dir: str | Path, spec_run_dir: str | Path) -> pd.DataFrame:
    """Per level of a speculative run: verified tokens per sequence per step and step time.

    From the server's counter deltas for the level: steps = sum(output_tokens - 1) -
    d_accepted (each decode step emits 1 + accepted tokens), verified tokens per sequence
    per step = 1 + d_draft_tokens / steps, step time = decode time / steps. The baseline
    run of the same plan gives the same level's baseline step time (``baseline_level_step_s``);
    ``baseline_step_s`` is that step moved along the baseline's own step-time curve to the
    batch the speculative level decoded at, which is smaller when requests finish unevenly.
    """
    spec = level_timings(spec_run_dir)
    base_timing = level_timings(baseline_run_dir)
    curve = baseline_curve(base_timing)
    base = base_timing.set_index("level")
    counters = summary_levels(spec_run_dir)
    rows = []
    for row in spec.to_dict("records"):
        level = row["level"]
        server = (counters.get(level) or {}).get("server_counters") or {}
        drafts, draft_tokens, accepted = (server.get(k) for k in ("d_drafts", "d_draft_tokens", "d_accepted_tokens"))
        if draft_tokens is None or accepted is None or level not in base.index:
            continue
        # d_accepted also counts drafts accepted past max_tokens or a stop, which the server
        # drops, so it under-counts steps; a merged chunk under-counts them too: the larger wins
        chunk_steps = 0.0 if math.isnan(row["chunk_steps"]) else row["chunk_steps"]
        steps = max(row["decode_tokens"] - accepted, chunk_steps)
        if steps <= 0:
            continue
        base_batch = float(base.loc[level, "batch"])
        # the same level's baseline step, moved to the batch the speculative run decoded at
        # (it thins out sooner: docs/predictor.md), so the fit sees verification alone
        at_spec_batch = curve(row["batch"]) / curve(base_batch)
        rows.append({
            "level": level, "concurrency": row["concurrency"], "batch": row["batch"],
            "verified_tokens_per_seq": 1.0 + draft_tokens / steps,
            "tokens_per_step": row["decode_tokens"] / steps,
            "steps": steps, "counter_steps": row["decode_tokens"] - accepted, "chunk_steps": row["chunk_steps"],
            "drafts": drafts, "draft_tokens": draft_tokens, "accepted_tokens": accepted,
            "step_s": row["decode_s"] / steps,
            "baseline_step_s": float(base.loc[level, "tpot_s"]) * at_spec_batch,
            "baseline_level_step_s": float(base.loc[level, "tpot_s"]),
            "baseline_batch": base_batch,
        })
    if not rows:
        raise SpeclabError(
            f"{spec_run_dir} has no level with speculative counters; run the calibration with a "
            "speculative option on a server that exposes /metrics."
        )
    return pd.DataFrame(rows)


def step_plans(replay: ReplayResult) -> dict[str, StepPlan]:
    """Request id -> the draft and emitted tokens of each of its replayed decode steps."""
    if replay.steps.empty:
        return {}
    plans = {}
    for request_id, group in replay.steps.groupby("request_id", sort=False):
        plans[str(request_id)] = StepPlan(group["draft_tokens"].astype(int).tolist(),
                                          group["emitted_tokens"].astype(int).tolist())
    return plans


def calibration_steps(baseline_run_dir: str | Path, spec_run_dir: str | Path | None = None,
                      option: SpecOption | None = None) -> pd.DataFrame:
    """Engine steps read from the streams of a baseline run and (optionally) a speculative
    run (:mod:`speclab.predict.steptrace`), with a ``speculative`` column and the run's name.

    The speculative run's draft tokens per step come from replaying its option over its own
    outputs (what the server really speculated on), matched chunk by chunk.
    """
    frames = [run_steps(read_records(baseline_run_dir), stalled_levels=_stalled_levels(baseline_run_dir))
              .assign(speculative=False, run=str(Path(baseline_run_dir).resolve()))]
    if spec_run_dir is not None:
        option = option or run_option(spec_run_dir)
        replay = replay_option(baseline_requests(spec_run_dir), option, max_model_len(spec_run_dir))
        frames.append(run_steps(read_records(spec_run_dir), step_plans(replay), _stalled_levels(spec_run_dir))
                      .assign(speculative=True, run=str(Path(spec_run_dir).resolve())))
    return pd.concat(frames, ignore_index=True)


def _stalled_levels(run_dir: str | Path) -> set[int]:
    """Levels during which the client's event loop stalled (their stream timing is lost)."""
    stalled = set()
    for level, summary in summary_levels(run_dir).items():
        harness = summary.get("harness") or {}
        if (harness.get("max_s") or 0.0) > CLIENT_STALL_TOLERANCE_S:
            stalled.add(level)
    return stalled


def served_dtype(run_dir: str | Path) -> str | None:
    """The dtype the run's server said it served (else the params asked for)."""
    manifest = read_json(Path(run_dir) / MANIFEST)
    return (manifest.get("server") or {}).get("dtype") or (manifest.get("params") or {}).get("dtype")


def max_model_len(run_dir: str | Path) -> int:
    """The context length the run's server served (its manifest, else the replay's default)."""
    from speclab.predict.replay import _max_model_len

    return _max_model_len(Path(run_dir))
