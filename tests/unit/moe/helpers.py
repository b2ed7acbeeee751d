"""Builders the MoE tests share."""

from __future__ import annotations

import pandas as pd

from speclab.moe.models import VerifyCurve
from speclab.moe.seeds import MoECost


def linear_curve(fixed: float = 0.01, per_expert: float = 0.05) -> VerifyCurve:
    """A verify curve on a known line: ``fixed`` + ``per_expert`` a distinct expert."""
    rows = [{"routing": "uniform", "tokens": n, "distinct_experts": d, "step_s": fixed + per_expert * d}
            for n, d in [(1, 8), (2, 15.8), (4, 31), (8, 59.5), (16, 110), (64, 300)]]
    return VerifyCurve(pd.DataFrame(rows), top_k=8, experts=384)


def line_cost() -> MoECost:
    """The MoE cost of ``linear_curve``."""
    curve = linear_curve()
    return MoECost("test line", "test", lambda d, t: float(curve.step_s(d, t)))
