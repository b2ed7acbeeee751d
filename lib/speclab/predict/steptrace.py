"""Engine steps read back from a run's streamed chunks.

A continuous-batching engine advances every running request by one step at a time, and
vLLM streams each running request one chunk per step (it merges them only for a reader that
falls behind). So the chunks of one level, pooled over its requests and sorted by arrival,
fall into clusters, one per engine step, and each cluster says what the step held:

* the requests that got a decode chunk: the **decoding sequences**, and their **context**
  (prompt plus the tokens emitted before the step: what attention reads);
* the requests that got their first token: their **prefill** ran in this step, and every
  sequence decoding beside it waited for it;
* for a speculative run, the **draft tokens** each sequence verified, from the proposer
  replayed over the run's own outputs (:mod:`speclab.predict.replay`), matched chunk by chunk: a
  request's ``i``-th decode chunk carries exactly the tokens its ``i``-th replayed step
  emits, or the request is left out of the match.

The time from one cluster to the next is a step's duration. A level of a few dozen requests
gives hundreds to thousands of steps, so a step-time model fitted on them
(:func:`speclab.predict.costmodel.fit_step_cost`) sees every batch size, context length, prefill
and draft length that occurred, rather than one mean per level.

Trust: a step whose duration includes idle engine time (no sequence was decoding in it) is
kept but marked ``decode_seqs == 0``; a request whose chunks were merged, or whose chunks do
not match its replayed steps, makes the steps it appears in ``matched == False``, and so
does a stall of the client (it then reads the queued chunks in one burst: steps of almost
no duration after one that absorbed the stall). The fit uses matched steps with decoding
sequences only.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["CLIENT_STALL_TOLERANCE_S", "STEP_COLUMNS", "StepPlan", "level_steps", "prompt_tokens", "run_steps"]

# A step shorter than this share of the level's median step was read in a burst after a
# stall of the client, not timed by the engine.
BURST_FRACTION = 0.25
# The longest the client's event loop may lag (the harness's loop-lag monitor, per level)
# before a level's stream timing is called lost: on a quiet 2-core host every level's longest
# lag was <= 0.1 s; with other work on the host, 0.67-5.2 s, and the streams read after such a
# stall arrive in bursts that no step structure survives (docs/predictor.md).
CLIENT_STALL_TOLERANCE_S = 0.25

# One row per engine step.
STEP_COLUMNS = ("level", "concurrency", "step", "end_s", "duration_s", "decode_seqs", "context_tokens",
                "prefills", "prefill_tokens", "draft_tokens", "emitted_tokens", "matched")


@dataclass(frozen=True)
class StepPlan:
    """What one request did at each of its decode steps: draft tokens verified and tokens emitted."""

    draft_tokens: Sequence[int]
    emitted_tokens: Sequence[int]


def _chunks(record: Mapping[str, Any]) -> tuple[list[float], list[int]] | None:
    offsets = record.get("chunk_offsets_s")
    if not isinstance(offsets, list) or not offsets:
        return None
    counts = record.get("chunk_tokens")
    if not isinstance(counts, list) or len(counts) != len(offsets):
        counts = [1] * len(offsets)
    start = float(record.get("send_time_s") or 0.0)
    return [start + float(o) for o in offsets], [int(n) for n in counts]


def prompt_tokens(record: Mapping[str, Any]) -> int:
    """A request record's prompt tokens: the server's count, else the length of its token ids."""
    value = record.get("prompt_tokens")
    if isinstance(value, numbers.Real) and not math.isnan(float(value)):
        return int(float(value))
    ids = record.get("prompt_token_ids")
    return len(ids) if isinstance(ids, list) else 0


def _matches(counts: list[int], plan: StepPlan | None) -> bool:
    """The request's decode chunks are one per engine step (with its plan: each carries what
    the replayed step emits; without one: a baseline, one token each)."""
    if plan is None:
        return all(n == 1 for n in counts[1:])
    return list(counts[1:]) == list(plan.emitted_tokens)


def level_steps(records: Sequence[Mapping[str, Any]], plans: Mapping[str, StepPlan] | None = None,
                *, gap_fraction: float = 0.3) -> pd.DataFrame:
    """The engine steps of one level (its request records, all of one level), one row each.

    ``plans``: request id -> :class:`StepPlan` for a speculative run (draft tokens per decode
    step); without it every step verifies no draft. Chunks closer together than
    ``gap_fraction`` of the level's typical step (the median gap between a request's own
    chunks) belong to one step, as long as no request appears twice.
    """
    events: list[tuple[float, int, int, int]] = []  # (time, request index, chunk index, tokens)
    own_gaps: list[float] = []
    info = []
    for i, record in enumerate(records):
        chunks = _chunks(record)
        if chunks is None:
            continue
        times, counts = chunks
        plan = plans.get(str(record.get("request_id"))) if plans is not None else None
        drafts = list(plan.draft_tokens) if plan is not None else None
        info.append((i, prompt_tokens(record), counts, drafts, _matches(counts, plan)))
        own_gaps.extend(np.diff(times).tolist())
        events.extend((t, i, j, n) for j, (t, n) in enumerate(zip(times, counts, strict=True)))
    if not events:
        return pd.DataFrame(columns=list(STEP_COLUMNS))
    positive = [g for g in own_gaps if g > 0]
    window = gap_fraction * float(np.median(positive)) if positive else 0.0
    by_index = {i: (prompt, counts, drafts, ok) for i, prompt, counts, drafts, ok in info}
    events.sort()
    clusters: list[list[tuple[float, int, int, int]]] = []
    current: list[tuple[float, int, int, int]] = []
    members: set[int] = set()
    for event in events:
        if current and (event[0] - current[0][0] > window or event[1] in members):
            clusters.append(current)
            current, members = [], set()
        current.append(event)
        members.add(event[1])
    clusters.append(current)

    first = records[0]
    rows = []
    previous_end: float | None = None
    for index, cluster in enumerate(clusters):
        end = max(e[0] for e in cluster)
        seqs = context = prefills = prefill_tokens = drafts_in_step = emitted = 0
        matched = True
        for _, i, j, n in cluster:
            prompt, counts, drafts, ok = by_index[i]
            matched = matched and ok
            if j == 0:
                prefills += 1
                prefill_tokens += prompt
                continue
            seqs += 1
            emitted += n
            context += prompt + sum(counts[:j])
            if drafts is not None and ok:
                drafts_in_step += drafts[j - 1]
        rows.append({
            "level": first.get("level"), "concurrency": first.get("concurrency"), "step": index,
            "end_s": end, "duration_s": end - previous_end if previous_end is not None else math.nan,
            "decode_seqs": seqs, "context_tokens": context, "prefills": prefills,
            "prefill_tokens": prefill_tokens, "draft_tokens": drafts_in_step, "emitted_tokens": emitted,
            "matched": matched,
        })
        previous_end = end
    frame = pd.DataFrame(rows, columns=list(STEP_COLUMNS))
    # A client that stalled reads every chunk that queued up meanwhile at once: steps of
    # (almost) no duration, after one that absorbed the stall. Their structure is lost.
    typical = float(frame["duration_s"].median()) if frame["duration_s"].notna().any() else 0.0
    burst = (frame["duration_s"] < BURST_FRACTION * typical).to_numpy()
    if burst.any():
        lost = burst | np.roll(burst, -1)
        frame.loc[lost, "matched"] = False
    return frame


def run_steps(records: Sequence[Mapping[str, Any]], plans: Mapping[str, StepPlan] | None = None,
              stalled_levels: set[Any] | frozenset[Any] = frozenset()) -> pd.DataFrame:
    """:func:`level_steps` for every level of a run's request records (successful ones);
    every step of a level in ``stalled_levels`` (the client stalled during it: see
    :data:`CLIENT_STALL_TOLERANCE_S`) is marked unmatched."""
    by_level: dict[Any, list[Mapping[str, Any]]] = {}
    for record in records:
        if record.get("ok", True) is False or record.get("error"):
            continue
        by_level.setdefault(record.get("level"), []).append(record)
    frames = []
    for level, rows in sorted(by_level.items(), key=lambda kv: (kv[0] is None, kv[0])):
        frame = level_steps(rows, plans)
        if level in stalled_levels:
            frame["matched"] = False
        if not frame.empty:
            frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(STEP_COLUMNS))
