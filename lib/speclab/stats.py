"""The two order statistics every table in speclab uses, defined once."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


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
