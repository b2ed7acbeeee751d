"""What a restart costs and when it pays back (speclab.predict.payback)."""

from __future__ import annotations

import math

import pytest

from speclab.errors import SpeclabError
from speclab.predict.payback import payback_hours


def test_payback_hours() -> None:
    frame = payback_hours(1800, {1: 2.0, 8: 1.5}, [{"concurrency": 1, "hours_per_day": 24}])
    total = frame.iloc[-1]
    # 24 h at speedup 2 frees 12 server-hours a day: 0.5 per hour; 0.5 h downtime -> 1 h
    assert total["server_hours_freed_per_day"] == pytest.approx(12.0)
    assert total["payback_hours"] == pytest.approx(1.0)
    assert bool(total["pays_back"])
    # interpolated speedup between levels
    frame = payback_hours(1800, {1: 2.0, 8: 1.5}, [{"concurrency": 4.5, "hours_per_day": 12}])
    assert frame.iloc[0]["speedup"] == pytest.approx(1.75)


def test_payback_never_when_the_option_loses() -> None:
    frame = payback_hours(1800, lambda c: 0.9, [{"concurrency": 8, "hours_per_day": 10}])
    assert math.isinf(frame.iloc[-1]["payback_hours"]) and not frame.iloc[-1]["pays_back"]
    with pytest.raises(SpeclabError):
        payback_hours(1800, {1: 2.0}, [{"concurrency": 1, "hours_per_day": 20}, {"concurrency": 2, "hours_per_day": 8}])
