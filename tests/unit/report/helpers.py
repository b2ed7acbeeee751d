"""Builders the report tests share."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from speclab.runfolder import RunData


def run_data(levels: list[dict], server: dict | None = None) -> RunData:
    """A finished baseline run holding only ``levels`` and the ``server`` record."""
    return RunData(Path("2026-12-03/101500-01-baseline"), {"status": "ok", "server": server or {}, "params": {}},
                   pd.DataFrame(), pd.DataFrame(levels))
