"""The seeds' case as a what-if: Kimi-K2.5 with n-gram on 8 PCIe GPUs
(``lib/speclab/data/whatif/seeds-kimi-k25-8xpcie.yaml``), the verdict per concurrency and the
input that decides it (``speclab explain-seeds``, 04-moespec)."""

from __future__ import annotations

from pathlib import Path

from speclab.whatif.predict import DRAWS, WhatIf, predict
from speclab.whatif.scenario import load_scenario

__all__ = ["SEEDS_SCENARIO", "explain_seeds", "seeds_statements"]

SEEDS_SCENARIO = Path(__file__).parents[1] / "data" / "whatif" / "seeds-kimi-k25-8xpcie.yaml"


def explain_seeds(path: str | Path | None = None, *, draws: int = DRAWS) -> WhatIf:
    """The what-if of the seeds' scenario (or another scenario file)."""
    return predict(load_scenario(path or SEEDS_SCENARIO), draws=draws)


def seeds_statements(result: WhatIf) -> list[str]:
    """Per concurrency: the verdict and the input that would flip it (the sentence the unit test holds)."""
    return [r.sentence for r in result.rows]
