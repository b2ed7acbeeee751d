"""The MoE engine measurement shipped with speclab (speclab.moe.engine), read back; its table's
arithmetic is tested in tests/unit/moe/test_workbook.py."""

from __future__ import annotations

from speclab.moe.engine import load_engine, shipped_engine
from speclab.moe.workbook import engine_table


def test_the_shipped_measurement_shows_the_moe_paying_more_per_verified_token() -> None:
    result = load_engine(shipped_engine())
    assert result["machine"]["cores"] and result["shape"]["num_local_experts"] == 16
    table = engine_table(result)
    spec = table[table["k"] > 0].pivot_table(index="k", columns="model", values="extra_ms_per_token")
    assert (spec["moe"] > spec["dense"]).all()
