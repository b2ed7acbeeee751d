"""Where decode time goes: engine steps and kernel buckets from profiler traces.

``analyse_profile(source, params)`` reads every rank's Chrome trace (stream-parsed, see
:mod:`speclab.profiling.trace`), finds vLLM's engine steps from their
``execute_context_<n>(<tok>)_generation_<n>(<tok>)`` annotations, sorts GPU kernels (or,
on CPU builds, CPU ops by self time) into ordered regex buckets, and returns tidy tables:

* ``steps``: one row per rank and step (kind, tokens, wall and busy time);
* ``breakdown``: rank x step x bucket (``time_us``, ``share``), zero rows included;
* ``summary``: rank x step kind x bucket totals, shares and time per step;
* ``names``: every op or kernel name with its bucket (``unmatched()`` lists the rest);
* ``scaling``: per bucket, time per step against tokens per step (slope, intercept):
  which buckets grow when a step verifies k+1 tokens, for the predictor;
* ``overlap``: on GPU traces, communication time overlapped by compute on other streams.

Capture lives in :mod:`speclab.profiling.capture`; the HTA cross-check in
:mod:`speclab.profiling.hta`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from speclab.profiling.buckets import VLLM_STEP_PATTERNS, ProfileParams, StepKind
from speclab.profiling.trace import (
    CPU_OP,
    KERNEL,
    KIND_NAMES,
    MEMCPY,
    MEMSET,
    RankTrace,
    read_traces,
)

# --------------------------------------------------------------------------- steps


@dataclass(frozen=True)
class StepAnnotation:
    kind: StepKind
    ctx_reqs: int
    ctx_tokens: int
    gen_reqs: int
    gen_tokens: int

    @property
    def tokens(self) -> int:
        return self.ctx_tokens + self.gen_tokens


def parse_step_annotation(name: str, patterns: Sequence[str | re.Pattern[str]] = VLLM_STEP_PATTERNS) -> StepAnnotation | None:
    """The step a vLLM annotation describes (kind and token counts), None if it is not one."""
    for pattern in patterns:
        found = re.match(pattern, name) if isinstance(pattern, str) else pattern.match(name)
        if not found:
            continue
        groups = found.groupdict()
        ctx_reqs, ctx_tokens, gen_reqs, gen_tokens = (
            int(groups.get(key) or 0) for key in ("ctx_reqs", "ctx_tokens", "gen_reqs", "gen_tokens"))
        if not any(k in groups for k in ("ctx_reqs", "gen_reqs")):
            kind: StepKind = "step"
        elif ctx_reqs and gen_reqs:
            kind = "mixed"
        elif ctx_reqs:
            kind = "prefill"
        elif gen_reqs:
            kind = "decode"
        else:
            kind = "idle"
        return StepAnnotation(kind, ctx_reqs, ctx_tokens, gen_reqs, gen_tokens)
    return None


def _steps_of(trace: RankTrace, params: ProfileParams) -> pd.DataFrame:
    """The rank's engine steps, in time order, with the window that owns their ops."""
    columns = ["step", "name", "step_kind", "ctx_reqs", "ctx_tokens", "gen_reqs", "gen_tokens",
               "tokens", "start_us", "annotation_us", "window_end_us"]
    cpu = trace.annotations[trace.annotations["where"] == "cpu"]
    compiled = [re.compile(p) for p in params.step_patterns]
    parsed: dict[str, StepAnnotation | None] = {}
    rows = []
    for name, ts, dur in zip(cpu["name"], cpu["ts_us"], cpu["dur_us"], strict=True):
        if name not in parsed:
            parsed[name] = parse_step_annotation(name, compiled)
        info = parsed[name]
        if info is None:
            continue
        rows.append((name, info.kind, info.ctx_reqs, info.ctx_tokens, info.gen_reqs, info.gen_tokens,
                     info.tokens, float(ts), float(dur)))
    if not rows:
        return pd.DataFrame(columns=columns)
    frame = pd.DataFrame(rows, columns=columns[1:-1]).sort_values("start_us", kind="stable")
    frame.insert(0, "step", np.arange(len(frame)))
    ends = (frame["start_us"] + frame["annotation_us"]).to_numpy()
    if params.step_window == "annotation" or len(frame) == 1:
        frame["window_end_us"] = ends
    else:
        starts = frame["start_us"].to_numpy()
        nxt = np.append(starts[1:], np.nan)
        # the last step has no successor: give it the median tail its predecessors had
        tails = starts[1:] - ends[:-1]
        tail = float(np.median(np.clip(tails, 0, None))) if len(tails) else 0.0
        nxt[-1] = ends[-1] + tail
        frame["window_end_us"] = np.maximum(nxt, ends)
    return frame.reset_index(drop=True)


def _assign_steps(key_ts: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Index of the step whose window holds each timestamp, -1 outside every window."""
    if steps.empty or len(key_ts) == 0:
        return np.full(len(key_ts), -1, dtype=np.int64)
    starts = steps["start_us"].to_numpy()
    ends = steps["window_end_us"].to_numpy()
    idx = np.searchsorted(starts, key_ts, side="right") - 1
    valid = idx >= 0
    inside = np.zeros(len(key_ts), dtype=bool)
    inside[valid] = key_ts[valid] < ends[idx[valid]]
    return np.where(inside, idx, -1)


# --------------------------------------------------------------------------- ops


def self_times(ts: np.ndarray, dur: np.ndarray, thread: np.ndarray) -> np.ndarray:
    """Exclusive time of nested CPU ops: each op's duration minus its direct children's.

    Ops nest per thread (``aten::linear`` holds ``aten::addmm``); summing inclusive times
    counts GEMM time twice, self times partition the busy time exactly.
    """
    n = len(ts)
    out = dur.astype(np.float64).copy()
    if n == 0:
        return out
    # order: thread, start, longer first (a parent before a child starting at the same time)
    codes = pd.factorize(thread)[0] if thread.dtype == object else thread
    order = np.lexsort((-dur, ts, codes))
    ts_l, end_l, codes_l = ts[order].tolist(), (ts + dur)[order].tolist(), np.asarray(codes)[order].tolist()
    order_l = order.tolist()
    stack_end: list[float] = []
    stack_idx: list[int] = []
    current = None
    eps = 1e-6
    for k in range(n):
        if codes_l[k] != current:
            current = codes_l[k]
            stack_end.clear()
            stack_idx.clear()
        t = ts_l[k]
        while stack_end and stack_end[-1] <= t + eps:
            stack_end.pop()
            stack_idx.pop()
        e = end_l[k]
        if stack_end:
            parent_end = stack_end[-1]
            out[stack_idx[-1]] -= (e if e < parent_end else parent_end) - t
        stack_end.append(e)
        stack_idx.append(order_l[k])
    return np.maximum(out, 0.0)


def _bucket_of_names(names: list[str], params: ProfileParams) -> np.ndarray:
    """Bucket index (into ``params.bucket_names()``) of each interned name."""
    labels = params.bucket_names()
    index = {name: i for i, name in enumerate(labels)}
    compiled = [(rule.compiled(), index[rule.name]) for rule in params.buckets]
    other = index[params.other_bucket]
    out = np.full(len(names), other, dtype=np.int32)
    for i, name in enumerate(names):
        for pattern, bucket in compiled:
            if pattern.search(name):
                out[i] = bucket
                break
    return out


# --------------------------------------------------------------------------- report


@dataclass
class ProfileReport:
    """Tidy tables over every rank; times in microseconds."""

    params: ProfileParams
    traces: pd.DataFrame
    steps: pd.DataFrame
    breakdown: pd.DataFrame
    summary: pd.DataFrame
    names: pd.DataFrame
    scaling: pd.DataFrame
    overlap: pd.DataFrame
    overlap_by_step: pd.DataFrame
    timings: dict[str, float] = field(default_factory=dict)

    def unmatched(self, rank: int | None = None) -> pd.DataFrame:
        """Names no rule matched, by time: what the rules should learn next."""
        frame = self.names[self.names["bucket"] == self.params.other_bucket]
        if rank is not None:
            frame = frame[frame["rank"] == rank]
        return frame.sort_values(["rank", "time_us"], ascending=[True, False]).reset_index(drop=True)

    def decode_shares(self, rank: int | None = None) -> pd.DataFrame:
        """Bucket shares of decode-step time, one column per rank."""
        frame = self.summary[self.summary["step_kind"] == "decode"]
        if rank is not None:
            frame = frame[frame["rank"] == rank]
        return frame.pivot_table(index="bucket", columns="rank", values="share", aggfunc="sum").sort_values(
            frame["rank"].min() if not frame.empty else 0, ascending=False)

    def save(self, folder: str | Path) -> dict[str, Path]:
        """Write every table as parquet (and the params as JSON) into ``folder``."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        written: dict[str, Path] = {}
        for name in ("traces", "steps", "breakdown", "summary", "names", "scaling", "overlap", "overlap_by_step"):
            frame: pd.DataFrame = getattr(self, name)
            target = out / f"profile_{name}.parquet"
            frame.to_parquet(target, index=False)
            written[name] = target
        (out / "profile_params.json").write_text(self.params.model_dump_json(indent=2) + "\n")
        return written


def analyse_profile(
    source: str | Path | Sequence[str | Path] | Sequence[RankTrace],
    params: ProfileParams | dict[str, Any] | None = None,
) -> ProfileReport:
    """Read every rank's trace under ``source`` (a folder, a file, a list of files, or traces
    already read) and build the report. Raises SpeclabError with one sentence on bad input."""
    params = _params(params)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    if isinstance(source, (list, tuple)) and source and all(isinstance(s, RankTrace) for s in source):
        traces = list(source)
    else:
        traces = read_traces(source, include_frontend=params.include_frontend,  # type: ignore[arg-type]
                             backend=params.backend, workers=params.workers)
    timings["parse_s"] = time.perf_counter() - started
    report = analyse_traces(traces, params)
    report.timings = {**timings, **report.timings}
    report.timings["total_s"] = time.perf_counter() - started
    return report


def _params(params: ProfileParams | dict[str, Any] | None) -> ProfileParams:
    if params is None:
        return ProfileParams()
    if isinstance(params, ProfileParams):
        return params
    from pydantic import ValidationError

    from speclab.errors import explain_validation_error

    try:
        return ProfileParams.model_validate(params)
    except ValidationError as exc:
        raise explain_validation_error(exc, "profile parameters") from None


@dataclass
class _RankResult:
    trace_row: dict[str, Any]
    steps: pd.DataFrame
    breakdown: pd.DataFrame
    names: pd.DataFrame
    overlap: dict[str, Any] | None
    overlap_by_step: pd.DataFrame


def analyse_traces(traces: Sequence[RankTrace], params: ProfileParams | dict[str, Any] | None = None) -> ProfileReport:
    """Build the report from traces already read (see :func:`speclab.profiling.trace.read_traces`)."""
    params = _params(params)
    started = time.perf_counter()
    labels = params.bucket_names()
    results = [_analyse_rank(trace, params, labels) for trace in traces]
    steps = _concat([r.steps for r in results])
    breakdown = _concat([r.breakdown for r in results])
    names = _concat([r.names for r in results])
    summary = _summary(breakdown, steps, names, labels)
    scaling = _scaling(breakdown, steps, params)
    overlap = pd.DataFrame([r.overlap for r in results if r.overlap is not None],
                           columns=["rank", "comm_us", "compute_us", "overlap_us", "exposed_comm_us",
                                    "overlap_share_of_comm"])
    overlap_by_step = _concat([r.overlap_by_step for r in results])
    table = pd.DataFrame([r.trace_row for r in results])
    return ProfileReport(
        params=params, traces=table, steps=steps, breakdown=breakdown, summary=summary, names=names,
        scaling=scaling, overlap=overlap, overlap_by_step=overlap_by_step,
        timings={"analyse_s": time.perf_counter() - started},
    )


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if f is not None and len(f.columns)]
    if not frames:
        return pd.DataFrame()
    non_empty = [f for f in frames if not f.empty]
    return pd.concat(non_empty or frames[:1], ignore_index=True)


def _analyse_rank(trace: RankTrace, params: ProfileParams, labels: list[str]) -> _RankResult:
    ops = trace.ops
    kind = ops["kind"].to_numpy()
    use_kernels = params.source == "kernel" or (params.source == "auto" and trace.has_kernels)
    if use_kernels:
        mask = (kind == KERNEL) | (kind == MEMCPY) | (kind == MEMSET)
    else:
        mask = kind == CPU_OP
    sel = ops[mask]
    ts = sel["ts_us"].to_numpy()
    dur = sel["dur_us"].to_numpy()
    name_id = sel["name_id"].to_numpy()
    if use_kernels:
        time_us = dur
        key_ts = _launch_times(sel, trace)
    else:
        time_us = self_times(ts, dur, _thread_key(sel["pid"].to_numpy(), sel["tid"].to_numpy()))
        key_ts = ts
    bucket_of_name = _bucket_of_names(trace.names, params)
    bucket = bucket_of_name[name_id] if len(name_id) else np.zeros(0, dtype=np.int32)

    steps = _steps_of(trace, params)
    step_idx = _assign_steps(key_ts, steps)
    n_steps, n_buckets = len(steps), len(labels)

    # rank x step x bucket sums through one bincount ("outside" steps go to slot n_steps)
    slot = np.where(step_idx >= 0, step_idx, n_steps)
    flat = slot * n_buckets + bucket
    size = (n_steps + 1) * n_buckets
    sums = np.bincount(flat, weights=time_us, minlength=size).reshape(n_steps + 1, n_buckets)
    counts = np.bincount(flat, minlength=size).reshape(n_steps + 1, n_buckets)

    source_name = "kernel" if use_kernels else "cpu_op"
    if n_steps:
        busy = sums[:n_steps].sum(axis=1)
        steps = steps.assign(rank=trace.rank, source=source_name)
        steps["wall_us"] = steps["window_end_us"] - steps["start_us"]
        steps["busy_us"] = busy
        steps["ops"] = counts[:n_steps].sum(axis=1)
        steps["tokens_per_request"] = np.where(
            steps["gen_reqs"] > 0, steps["gen_tokens"] / steps["gen_reqs"].clip(lower=1), np.nan)
        if use_kernels:
            steps["gpu_span_us"] = _gpu_span(ts, dur, step_idx, n_steps)
        steps = steps[["rank", "step", "step_kind", "tokens", "ctx_reqs", "ctx_tokens", "gen_reqs",
                       "gen_tokens", "tokens_per_request", "start_us", "annotation_us", "wall_us",
                       "busy_us", *(["gpu_span_us"] if use_kernels else []), "ops", "source", "name"]]
        step_rows = np.repeat(np.arange(n_steps), n_buckets)
        totals = np.repeat(busy, n_buckets)
        values = sums[:n_steps].ravel()
        breakdown = pd.DataFrame({
            "rank": trace.rank,
            "step": step_rows,
            "step_kind": steps["step_kind"].to_numpy()[step_rows],
            "tokens": steps["tokens"].to_numpy()[step_rows],
            "bucket": pd.Categorical(np.tile(labels, n_steps), categories=labels),
            "time_us": values,
            "share": np.divide(values, totals, out=np.zeros_like(values), where=totals > 0),
            "count": counts[:n_steps].ravel(),
        })
    else:
        steps = pd.DataFrame(columns=["rank", "step", "step_kind", "tokens"])
        breakdown = pd.DataFrame(columns=["rank", "step", "step_kind", "tokens", "bucket", "time_us",
                                          "share", "count"])

    # per-name totals (every name, with its bucket) and the time outside any step
    name_time = np.bincount(name_id, weights=time_us, minlength=len(trace.names))
    name_count = np.bincount(name_id, minlength=len(trace.names))
    used = np.nonzero(name_count)[0]
    total_time = float(time_us.sum())
    names = pd.DataFrame({
        "rank": trace.rank,
        "bucket": np.asarray(labels, dtype=object)[bucket_of_name[used]],
        "name": np.asarray(trace.names, dtype=object)[used],
        "kind": np.asarray(KIND_NAMES, dtype=object)[_kind_of_names(sel, len(trace.names))[used]],
        "time_us": name_time[used],
        "count": name_count[used],
        "share": name_time[used] / total_time if total_time > 0 else 0.0,
    }).sort_values("time_us", ascending=False, kind="stable").reset_index(drop=True)

    overlap: dict[str, Any] | None = None
    overlap_by_step = pd.DataFrame()
    if use_kernels:
        comm_index = labels.index(params.communication_bucket) if params.communication_bucket in labels else -1
        is_kernel = sel["kind"].to_numpy() == KERNEL
        overlap, overlap_by_step = _overlap(ts, dur, is_kernel, bucket == comm_index, step_idx, n_steps)
        overlap["rank"] = trace.rank
        if not overlap_by_step.empty:
            overlap_by_step.insert(0, "rank", trace.rank)

    trace_row = {
        "rank": trace.rank,
        "path": str(trace.path),
        "source": source_name,
        "events": trace.events,
        "ops": int(mask.sum()),
        "names": int(len(used)),
        "steps": n_steps,
        "op_time_us": total_time,
        "outside_steps_us": float(sums[n_steps].sum()),
        "mb_read": trace.bytes_read / 1e6,
        "parse_s": trace.parse_s,
        "backend": trace.backend,
        "notes": "; ".join(trace.notes + ([] if n_steps else [
            "no engine-step annotations found: everything is in step -1 (is this a vLLM worker trace?)"])),
    }
    return _RankResult(trace_row, steps, breakdown, names, overlap, overlap_by_step)


def _thread_key(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """One integer per (process, thread) pair."""
    p_codes, p_uniques = pd.factorize(pid)
    t_codes, t_uniques = pd.factorize(tid)
    return p_codes.astype(np.int64) * max(len(t_uniques), 1) + t_codes


def _kind_of_names(sel: pd.DataFrame, n_names: int) -> np.ndarray:
    out = np.zeros(n_names, dtype=np.int64)
    out[sel["name_id"].to_numpy()] = sel["kind"].to_numpy()
    return out


def _launch_times(sel: pd.DataFrame, trace: RankTrace) -> np.ndarray:
    """When the CPU launched each kernel (its runtime call, by correlation id); the kernel's
    own start where the launch is missing. Steps are CPU ranges: GPU work runs behind them."""
    ts = sel["ts_us"].to_numpy()
    corr = sel["corr"].to_numpy()
    launches = trace.launches
    if launches.empty:
        return ts
    lc = launches["corr"].to_numpy()
    lt = launches["ts_us"].to_numpy()
    order = np.argsort(lc, kind="stable")
    lc, lt = lc[order], lt[order]
    pos = np.searchsorted(lc, corr)
    pos_ok = np.clip(pos, 0, len(lc) - 1)
    found = (pos < len(lc)) & (lc[pos_ok] == corr) & (corr >= 0)
    return np.where(found, lt[pos_ok], ts)


def _gpu_span(ts: np.ndarray, dur: np.ndarray, step_idx: np.ndarray, n_steps: int) -> np.ndarray:
    """First kernel start to last kernel end, per step (NaN for a step without kernels)."""
    span = np.full(n_steps, np.nan)
    ok = step_idx >= 0
    if not ok.any():
        return span
    frame = pd.DataFrame({"step": step_idx[ok], "start": ts[ok], "end": ts[ok] + dur[ok]})
    grouped = frame.groupby("step").agg(start=("start", "min"), end=("end", "max"))
    span[grouped.index.to_numpy()] = (grouped["end"] - grouped["start"]).to_numpy()
    return span


# --------------------------------------------------------------------------- overlap


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merged, sorted, disjoint intervals covering the given ones."""
    if len(starts) == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    running = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > running[:-1]
    group = np.cumsum(new) - 1
    merged_s = s[new]
    merged_e = np.zeros(len(merged_s))
    np.maximum.at(merged_e, group, running)
    return merged_s, merged_e


def _intersection(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """Length of time covered by both disjoint interval sets."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return 0.0
    points = np.concatenate([a[0], a[1], b[0], b[1]])
    da = np.concatenate([np.ones(len(a[0])), -np.ones(len(a[1])), np.zeros(len(b[0]) + len(b[1]))])
    db = np.concatenate([np.zeros(len(a[0]) + len(a[1])), np.ones(len(b[0])), -np.ones(len(b[1]))])
    # at equal times process ends before starts, so touching intervals do not overlap
    order = np.lexsort((da + db, points))
    points, ca, cb = points[order], np.cumsum(da[order]), np.cumsum(db[order])
    both = (ca[:-1] > 0) & (cb[:-1] > 0)
    return float(np.sum(np.diff(points)[both]))


def _overlap_numbers(ts: np.ndarray, end: np.ndarray, comm: np.ndarray, compute: np.ndarray) -> dict[str, float]:
    comm_u = _union(ts[comm], end[comm])
    comp_u = _union(ts[compute], end[compute])
    comm_us = float(np.sum(comm_u[1] - comm_u[0]))
    compute_us = float(np.sum(comp_u[1] - comp_u[0]))
    both = _intersection(comm_u, comp_u)
    return {
        "comm_us": comm_us,
        "compute_us": compute_us,
        "overlap_us": both,
        "exposed_comm_us": comm_us - both,
        "overlap_share_of_comm": both / comm_us if comm_us > 0 else np.nan,
    }


def _overlap(
    ts: np.ndarray, dur: np.ndarray, is_kernel: np.ndarray, is_comm: np.ndarray,
    step_idx: np.ndarray, n_steps: int,
) -> tuple[dict[str, Any], pd.DataFrame]:
    """Communication kernels running while compute kernels run (necessarily on other streams)."""
    end = ts + dur
    comm = is_kernel & is_comm
    compute = is_kernel & ~is_comm
    whole = _overlap_numbers(ts, end, comm, compute)
    rows = []
    if comm.any() and n_steps:
        order = np.argsort(step_idx, kind="stable")
        bounds = np.searchsorted(step_idx[order], np.arange(n_steps + 1))
        for step in range(n_steps):
            idx = order[bounds[step]:bounds[step + 1]]
            if len(idx) == 0:
                continue
            numbers = _overlap_numbers(ts[idx], end[idx], comm[idx], compute[idx])
            rows.append({"step": step, **numbers})
    return whole, pd.DataFrame(rows)


# --------------------------------------------------------------------------- summaries


WHOLE_TRACE = "(whole trace)"


def _summary(breakdown: pd.DataFrame, steps: pd.DataFrame, names: pd.DataFrame, labels: list[str]) -> pd.DataFrame:
    """Per rank, step kind and bucket; plus a ``(whole trace)`` kind over every op, steps or
    not (all an SGLang trace without step annotations gets)."""
    columns = ["rank", "step_kind", "bucket", "time_us", "share", "steps", "time_per_step_us", "tokens_per_step"]
    parts = []
    if not breakdown.empty:
        grouped = breakdown.groupby(["rank", "step_kind", "bucket"], observed=True, sort=True)["time_us"].sum()
        frame = grouped.reset_index()
        frame["bucket"] = frame["bucket"].astype(str)
        per_kind = steps.groupby(["rank", "step_kind"]).agg(steps=("step", "count"), tokens_per_step=("tokens", "mean"))
        parts.append(frame.merge(per_kind.reset_index(), on=["rank", "step_kind"], how="left"))
    if not names.empty:
        whole = names.groupby(["rank", "bucket"])["time_us"].sum().unstack(fill_value=0.0)
        whole = whole.reindex(columns=labels, fill_value=0.0).stack().rename("time_us").reset_index()
        whole.insert(1, "step_kind", WHOLE_TRACE)
        if not steps.empty:
            per_rank = steps.groupby("rank").agg(steps=("step", "count"), tokens_per_step=("tokens", "mean"))
            whole = whole.merge(per_rank.reset_index(), on="rank", how="left")
        else:
            whole["steps"], whole["tokens_per_step"] = 0, np.nan
        parts.append(whole)
    if not parts:
        return pd.DataFrame(columns=columns)
    frame = pd.concat(parts, ignore_index=True)
    frame["steps"] = frame["steps"].fillna(0).astype(int)
    totals = frame.groupby(["rank", "step_kind"])["time_us"].transform("sum")
    frame["share"] = np.where(totals > 0, frame["time_us"] / totals.where(totals > 0, 1), 0.0)
    frame["time_per_step_us"] = frame["time_us"] / frame["steps"].where(frame["steps"] > 0)
    return frame[columns].reset_index(drop=True)


def _scaling(breakdown: pd.DataFrame, steps: pd.DataFrame, params: ProfileParams) -> pd.DataFrame:
    """Per rank and bucket: time per step = intercept + slope x tokens per step, over the
    steps of ``params.scaling_kinds``. ``scales_with_tokens`` when the slope is significant
    (p < 0.05) and the fitted time grows by 10 % or more across the observed token range."""
    columns = ["rank", "bucket", "steps", "tokens_min", "tokens_max", "mean_time_us",
               "intercept_us", "slope_us_per_token", "r2", "p_value", "growth_over_range",
               "scales_with_tokens"]
    if breakdown.empty:
        return pd.DataFrame(columns=columns)
    from scipy import stats

    chosen = breakdown[breakdown["step_kind"].isin(params.scaling_kinds)]
    rows = []
    series: list[tuple[int, str, pd.DataFrame]] = []
    for (rank, bucket), group in chosen.groupby(["rank", "bucket"], observed=True, sort=True):
        series.append((rank, str(bucket), group[["tokens", "time_us"]]))
    for rank, group in chosen.groupby("rank", sort=True):
        series.append((rank, "(all buckets)", group.groupby("step").agg(tokens=("tokens", "first"),
                                                                       time_us=("time_us", "sum"))))
    chosen_steps = steps[steps["step_kind"].isin(params.scaling_kinds)] if not steps.empty else steps
    for rank, group in chosen_steps.groupby("rank", sort=True):
        series.append((rank, "(step wall)", group.rename(columns={"wall_us": "time_us"})[["tokens", "time_us"]]))
    for rank, bucket, data in series:
        x = data["tokens"].to_numpy(dtype=float)
        y = data["time_us"].to_numpy(dtype=float)
        row: dict[str, Any] = {
            "rank": rank, "bucket": bucket, "steps": len(x),
            "tokens_min": float(x.min()) if len(x) else np.nan,
            "tokens_max": float(x.max()) if len(x) else np.nan,
            "mean_time_us": float(y.mean()) if len(y) else np.nan,
            "intercept_us": np.nan, "slope_us_per_token": np.nan, "r2": np.nan, "p_value": np.nan,
            "growth_over_range": np.nan, "scales_with_tokens": False,
        }
        if len(x) >= 3 and np.unique(x).size >= 2:
            if np.ptp(y) == 0:
                slope, intercept, r, p = 0.0, float(y[0]), 0.0, 1.0
            else:
                fit = stats.linregress(x, y)
                slope, intercept, r, p = float(fit.slope), float(fit.intercept), float(fit.rvalue), float(fit.pvalue)
            low = intercept + slope * x.min()
            growth = slope * (x.max() - x.min()) / low if low > 0 else np.nan
            row.update(intercept_us=intercept, slope_us_per_token=slope, r2=r * r, p_value=p,
                       growth_over_range=growth,
                       scales_with_tokens=bool(p < 0.05 and slope > 0 and (growth >= 0.1 or np.isnan(growth))))
        elif len(x):
            row["intercept_us"] = float(y.mean())
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


