"""The MoE engine measurement's table: step ratios against each model's own plain step."""

from __future__ import annotations

import pytest

from speclab.moe.engine import load_engine, shipped_engine
from speclab.moe.workbook import engine_table


def _row(model: str, k: int, step_s: float, verified: float) -> dict:
    return {"model": model, "k": k, "step_s": step_s, "verified_tokens_per_step": verified, "steps": 100,
            "requests": 3}


def test_ratios_are_against_the_same_models_plain_step() -> None:
    table = engine_table({"rows": [_row("moe", 0, 0.010, 1.0), _row("moe", 4, 0.015, 5.0),
                                   _row("dense", 0, 0.010, 1.0), _row("dense", 4, 0.011, 5.0)]})
    four = table[table["k"] == 4].set_index("model")
    assert four.loc["moe", "step_ratio"] == pytest.approx(1.5)
    assert four.loc["dense", "step_ratio"] == pytest.approx(1.1)
    assert four.loc["moe", "extra_ms_per_token"] == pytest.approx(5.0 / 4)
    assert table[table["k"] == 0]["extra_ms_per_token"].isna().all()


def test_the_shipped_measurement_shows_the_moe_paying_more_per_verified_token() -> None:
    result = load_engine(shipped_engine())
    assert result["machine"]["cores"] and result["shape"]["num_local_experts"] == 16
    table = engine_table(result)
    spec = table[table["k"] > 0].pivot_table(index="k", columns="model", values="extra_ms_per_token")
    assert (spec["moe"] > spec["dense"]).all()
