"""The shipped H200 MoE layer curves, read once per module."""

from __future__ import annotations

import pytest

from speclab.moe import workbook as mw
from speclab.params import MoESpecParams


@pytest.fixture(scope="module")
def gpu():
    return mw.gpu_bench_frame(MoESpecParams(cpu_bench=False))


@pytest.fixture(scope="module")
def costs(gpu):
    return mw.seeds_moe_costs(gpu)
