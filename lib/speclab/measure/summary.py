"""Per-level aggregates in the ``summary.json`` shape other tools read.

The keys of :data:`speclab.runfolder.LEVEL_KEYS` are a contract: every level object carries each
of them, ``None`` where not applicable; extra keys sit beside them.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from speclab.measure.metrics import CounterWindow
from speclab.runfolder import RequestRecord
from speclab.stats import median, quantile
from speclab.urls import strip_credentials_in_text


def level_duration_s(records: Sequence[RequestRecord]) -> float | None:
    """From the first send to the last token received, on the run clock."""
    if not records:
        return None
    start = min(r.send_time_s for r in records)
    end = max(r.send_time_s + (r.e2e_s or r.ttft_s or 0.0) for r in records)
    return end - start if end > start else None


# A closed-loop level whose achieved in-flight falls below this share of its concurrency is
# not the load it is labelled with: every table and the report say so.
INFLIGHT_SHARE_MIN = 0.9


def _end_s(record: RequestRecord) -> float:
    return record.send_time_s + (record.e2e_s or record.ttft_s or 0.0)


def steady_window(records: Sequence[RequestRecord], concurrency: int | None) -> tuple[float, float] | None:
    """The part of a closed-loop level with every slot busy, on the run clock: from the moment
    the first ``concurrency`` requests sent all have their first token (ramp-up over) to the
    last send (after it nobody refills a slot: the drain). None when the level never got there
    (no more requests than slots, or a window of no length)."""
    if not concurrency or len(records) <= concurrency:
        return None
    ordered = sorted(records, key=lambda r: r.send_time_s)
    start = max(r.send_time_s + (r.ttft_s if r.ttft_s is not None else (r.e2e_s or 0.0))
                for r in ordered[:concurrency])
    end = ordered[-1].send_time_s
    return (start, end) if end > start else None


def inflight_mean(records: Sequence[RequestRecord], start: float, end: float) -> float:
    """Requests in flight (sent, not finished) on average over ``[start, end]``."""
    busy = sum(max(0.0, min(_end_s(r), end) - max(r.send_time_s, start)) for r in records)
    return busy / (end - start)


def tokens_between(records: Sequence[RequestRecord], start: float, end: float) -> float:
    """Output tokens of the successful requests that arrived within ``[start, end]``, from each
    chunk's time and token count (tokens spread evenly over the chunks where counts are missing)."""
    total = 0.0
    for r in records:
        if not r.ok or not r.output_tokens:
            continue
        offsets = r.chunk_offsets_s
        if offsets:
            counts = (r.chunk_tokens if r.chunk_tokens and len(r.chunk_tokens) == len(offsets)
                      else [r.output_tokens / len(offsets)] * len(offsets))
            total += sum(n for t, n in zip(offsets, counts, strict=True) if start <= r.send_time_s + t <= end)
        elif r.ttft_s is not None and r.e2e_s is not None and r.e2e_s > r.ttft_s:
            first, last = r.send_time_s + r.ttft_s, r.send_time_s + r.e2e_s
            overlap = max(0.0, min(last, end) - max(first, start))
            total += r.output_tokens * overlap / (last - first)
    return total


def load_shape(records: Sequence[RequestRecord], concurrency: int | None, rate: float | None) -> dict[str, Any]:
    """Where a level's throughput is read and how much load it really had: the steady window
    (closed loop), tokens per second within it, and the achieved mean in-flight."""
    duration = level_duration_s(records)
    window = steady_window(records, concurrency) if rate is None else None
    shape: dict[str, Any] = {"steady_window_s": list(window) if window else None,
                             "inflight_target": concurrency, "inflight_mean": None,
                             "output_tok_s_steady": None}
    if window is not None:
        start, end = window
        shape["inflight_mean"] = inflight_mean(records, start, end)
        shape["output_tok_s_steady"] = tokens_between(records, start, end) / (end - start)
    elif duration and records:
        first = min(r.send_time_s for r in records)
        shape["inflight_mean"] = inflight_mean(records, first, first + duration)
    shape["inflight_below_target"] = bool(
        rate is None and concurrency and shape["inflight_mean"] is not None
        and shape["inflight_mean"] < INFLIGHT_SHARE_MIN * concurrency)
    return shape


# Fewer requests than this inside the steady window: latency percentiles fall back to the whole level.
STEADY_LATENCY_MIN = 3


def steady_requests(records: Sequence[RequestRecord], window: tuple[float, float] | None) -> tuple[
        list[RequestRecord], str]:
    """The successful requests whose latency describes the level's load: those sent and finished
    inside the steady window (no ramp-up, no drain), where it holds at least
    :data:`STEADY_LATENCY_MIN` of them; else every successful request. Also which it was, in words."""
    ok = [r for r in records if r.ok]
    if window is None:
        return ok, "whole level (no steady window: an open-loop level, or no more requests than slots)"
    start, end = window
    inside = [r for r in ok if r.send_time_s >= start and _end_s(r) <= end]
    if len(inside) < STEADY_LATENCY_MIN:
        return ok, f"whole level ({len(inside)} requests inside the steady window, fewer than {STEADY_LATENCY_MIN})"
    return inside, f"steady window ({len(inside)} of {len(ok)} requests: ramp-up and drain left out)"


def summarise_level(
    records: Sequence[RequestRecord],
    *,
    concurrency: int | None,
    rate: float | None,
    counters: CounterWindow | None,
    foreign: bool | None,
    harness: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One level's object: client figures, server counter deltas, harness lag."""
    ok = [r for r in records if r.ok]
    tokens = sum(r.output_tokens or 0 for r in ok)
    duration = level_duration_s(records)
    shape = load_shape(records, concurrency, rate)
    whole_level_tok_s = tokens / duration if duration and ok else None
    window = shape["steady_window_s"]
    timed, latency_window = steady_requests(records, tuple(window) if window else None)
    chunk_tokens = sum(r.output_tokens or 0 for r in ok if r.chunks)
    chunks = sum(r.chunks for r in ok if r.output_tokens)
    level: dict[str, Any] = {
        "concurrency": concurrency,
        "rate": rate,
        "requests": len(records),
        "errors": len(records) - len(ok),
        "output_tokens": tokens,
        "duration_s": duration,
        # No success, no throughput: 0.0 would read as a (very slow) measurement. Closed loop:
        # read within the steady window (ramp-up and drain left out) where the level has one.
        "output_tok_s": shape["output_tok_s_steady"] if shape["output_tok_s_steady"] else whole_level_tok_s,
        # latency, like tok/s, within the steady window where it holds enough requests (latency_window)
        "ttft_s_median": median([r.ttft_s for r in timed]),
        "ttft_s_p99": quantile([r.ttft_s for r in timed if r.ttft_s is not None], 0.99),
        "tpot_s_median": median([r.tpot_s for r in timed]),
        "tpot_s_p99": quantile([r.tpot_s for r in timed if r.tpot_s is not None], 0.99),
        "e2e_s_median": median([r.e2e_s for r in timed]),
        "tokens_per_chunk_mean": chunk_tokens / chunks if chunks else None,
        "acceptance_rate": counters.acceptance_rate if counters else None,
        "mean_acceptance_length": counters.mean_acceptance_length if counters else None,
        "server_tpot_s_mean": counters.server_tpot_s_mean if counters else None,
        "server_ttft_s_mean": counters.server_ttft_s_mean if counters else None,
        "foreign_traffic": foreign,
    }
    # Beside the contract keys: what a careful reader wants next.
    level.update(shape)
    level["output_tok_s_level"] = whole_level_tok_s
    level["latency_window"] = latency_window
    level["ttfa_s_median"] = median([r.ttfa_s for r in ok])
    level["tpot_s_mean"] = statistics.fmean([r.tpot_s for r in ok if r.tpot_s is not None]) if any(
        r.tpot_s is not None for r in ok) else None
    level["ttft_s_mean"] = statistics.fmean([r.ttft_s for r in ok if r.ttft_s is not None]) if any(
        r.ttft_s is not None for r in ok) else None
    level["reasoning_tokens"] = sum(r.reasoning_tokens or 0 for r in ok) if any(
        r.reasoning_tokens is not None for r in ok) else None
    level["output_tokens_sources"] = sorted({r.output_tokens_source for r in ok})
    level["per_position_acceptance"] = (
        list(counters.per_position_rates) if counters and counters.per_position_rates else None)
    level["server_counters"] = counters.to_dict() if counters else None
    level["truncated"] = sum(1 for r in records if getattr(r, "truncated", False))
    # hidden before the cut, so that a secret at the 200th character is not left half-shown
    level["error_examples"] = sorted({strip_credentials_in_text(r.error or "")[:200] for r in records if not r.ok})[:3]
    if harness:
        level["harness"] = harness
    return level
