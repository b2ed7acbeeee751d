"""The seeded synthetic log (speclab.traffic.gen)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from speclab.traffic.gen import generate_rows


def test_generator_is_seeded_and_follows_the_day() -> None:
    a = list(generate_rows(3000, seed=1, ids=True))
    assert list(generate_rows(30, seed=1, ids=True)) == list(generate_rows(30, seed=1, ids=True))
    assert list(generate_rows(30, seed=1, ids=True)) != list(generate_rows(30, seed=2, ids=True))
    hours = np.array([(r["timestamp"] % 86400) / 3600 for r in a])
    assert (np.abs(hours - 15) < 3).sum() > 2.5 * (np.abs((hours + 12) % 24 - 15) < 3).sum()  # peak vs trough
    frame = pd.DataFrame(a)
    assert set(frame["category"]) == {"code-edit", "extraction", "rag-qa", "summarise", "chat"}
    assert all(r["timestamp"] <= s["timestamp"] for r, s in zip(a, a[1:], strict=False))
