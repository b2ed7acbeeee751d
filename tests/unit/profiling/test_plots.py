"""A profile saved and drawn (speclab.profiling.plots)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from speclab.profiling import plot_bucket_scaling, plot_step_breakdown


def test_report_saves_and_plots(gpu_report, tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    written = gpu_report.save(tmp_path)
    assert pd.read_parquet(written["breakdown"]).shape == gpu_report.breakdown.shape
    fig = plot_step_breakdown(gpu_report, kinds=["decode"])
    assert fig.axes[0].get_ylabel() == "time (ms)"
    fig = plot_bucket_scaling(gpu_report)
    assert fig.axes[0].get_xlabel() == "tokens per step"
    shares = gpu_report.decode_shares()
    assert shares[0].sum() == pytest.approx(1.0) and shares.index[0] == "norms_elementwise"
