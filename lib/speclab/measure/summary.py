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
    chunk_tokens = sum(r.output_tokens or 0 for r in ok if r.chunks)
    chunks = sum(r.chunks for r in ok if r.output_tokens)
    level: dict[str, Any] = {
        "concurrency": concurrency,
        "rate": rate,
        "requests": len(records),
        "errors": len(records) - len(ok),
        "output_tokens": tokens,
        "duration_s": duration,
        # No success, no throughput: 0.0 would read as a (very slow) measurement.
        "output_tok_s": tokens / duration if duration and ok else None,
        "ttft_s_median": median([r.ttft_s for r in ok]),
        "ttft_s_p99": quantile([r.ttft_s for r in ok if r.ttft_s is not None], 0.99),
        "tpot_s_median": median([r.tpot_s for r in ok]),
        "tpot_s_p99": quantile([r.tpot_s for r in ok if r.tpot_s is not None], 0.99),
        "e2e_s_median": median([r.e2e_s for r in ok]),
        "tokens_per_chunk_mean": chunk_tokens / chunks if chunks else None,
        "acceptance_rate": counters.acceptance_rate if counters else None,
        "mean_acceptance_length": counters.mean_acceptance_length if counters else None,
        "server_tpot_s_mean": counters.server_tpot_s_mean if counters else None,
        "server_ttft_s_mean": counters.server_ttft_s_mean if counters else None,
        "foreign_traffic": foreign,
    }
    # Beside the contract keys: what a careful reader wants next.
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
