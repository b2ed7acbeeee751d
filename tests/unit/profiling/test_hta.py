"""speclab and HolisticTraceAnalysis read the same traces the same way (per-name totals)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

pytest.importorskip("hta", reason="HolisticTraceAnalysis is not installed (pip install HolisticTraceAnalysis)")

from speclab.profiling.hta import compare_with_hta, hta_agrees  # noqa: E402

# HTA 0.5 on pandas 3 warns about its own inplace drops
pytestmark = pytest.mark.filterwarnings("ignore::Warning:hta")

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"


@pytest.fixture(autouse=True)
def _quiet_hta():
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


@pytest.mark.parametrize(("folder", "kinds"), [
    ("h200-qwen2moe", ["kernel", "gpu_memcpy", "gpu_memset"]),
    ("vllm-cpu-ngram", ["cpu_op"]),
])
def test_per_name_totals_agree_with_hta(folder: str, kinds: list[str]) -> None:
    comparison = compare_with_hta(TRACES / folder)
    assert comparison.attrs["kinds"] == kinds
    assert len(comparison) > 40
    assert (comparison["speclab_count"] == comparison["hta_count"]).all()
    assert comparison["diff_us"].abs().max() < 1e-3
    assert hta_agrees(comparison)


def test_hta_default_rounding_is_what_differs() -> None:
    # HTA rounds start up and end down to whole microseconds unless told otherwise
    comparison = compare_with_hta(TRACES / "h200-qwen2moe", exact=False)
    assert (comparison["speclab_count"] == comparison["hta_count"]).all()
    assert not hta_agrees(comparison)
    assert (comparison["hta_us"] <= comparison["speclab_us"] + 1e-6).all()
