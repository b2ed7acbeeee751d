"""A run's outcome from its levels: ok, degraded or failed, with one sentence saying why.

A run in which every request failed used to be finalised ``ok`` with ``output_tok_s: 0.0``.
Here the status follows the records: ``failed`` when no request succeeded (nothing was
measured), ``degraded`` when more than :data:`DEGRADED_ERROR_SHARE` of the requests failed
or were truncated (the figures cover only the survivors, which are biased towards the
easy ones), ``ok`` otherwise. The CLI's exit code follows the status (:data:`EXIT_CODES`).
Pure functions over level dicts: no I/O, usable from analysis code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DEGRADED_ERROR_SHARE", "EXIT_CODES", "RunOutcome", "assess_levels"]

# Above this share of failed requests the surviving ones no longer stand for the plan:
# the fastest (or shortest) requests are the likeliest to survive a struggling server.
DEGRADED_ERROR_SHARE = 0.05

# speclab's exit codes; 2 stays argparse's "bad usage" (and probe's contradiction).
EXIT_CODES = {"ok": 0, "failed": 1, "degraded": 3, "interrupted": 130, "terminated": 143}


@dataclass(frozen=True)
class RunOutcome:
    """What a sweep measured: its status, counts, and a sentence when it is not ``ok``."""

    status: str
    requests: int
    errors: int
    truncated: int
    sentence: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "requests": self.requests, "errors": self.errors,
                "truncated": self.truncated, "sentence": self.sentence}


def assess_levels(levels: Sequence[Mapping[str, Any]],
                  max_error_share: float = DEGRADED_ERROR_SHARE) -> RunOutcome:
    """The outcome of a sweep from its ``summary.json`` levels (``requests``, ``errors``,
    ``truncated`` and ``error_examples`` keys); ``failed`` when nothing succeeded."""
    requests = sum(int(level.get("requests") or 0) for level in levels)
    errors = sum(int(level.get("errors") or 0) for level in levels)
    truncated = sum(int(level.get("truncated") or 0) for level in levels)
    example = next((e for level in levels for e in (level.get("error_examples") or []) if e), None)
    because = f" (first error: {example.rstrip('.')})" if example else ""
    if requests == 0:
        return RunOutcome("failed", 0, 0, 0, "No request was sent, so nothing was measured; "
                          "check the plan's levels and prompts.")
    if errors >= requests:
        return RunOutcome("failed", requests, errors, truncated,
                          f"All {requests} requests failed{because}; nothing was measured, "
                          "so check the server before reading any figure.")
    share = errors / requests
    if share > max_error_share:
        cut = f", {truncated} of them truncated streams" if truncated else ""
        return RunOutcome("degraded", requests, errors, truncated,
                          f"{errors} of {requests} requests failed ({share:.0%}{cut}){because}; "
                          "the figures cover only the requests that succeeded.")
    return RunOutcome("ok", requests, errors, truncated, None)
