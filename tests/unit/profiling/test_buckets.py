"""What profile time is cut into (speclab.profiling.buckets): the rules, overridden and validated."""

from __future__ import annotations

from pathlib import Path

import pytest

from speclab.errors import SpeclabError
from speclab.profiling import DEFAULT_BUCKETS, ProfileParams, analyse_profile
from tests.unit.profiling.helpers import GPU_DIR


def test_rules_are_overridable_and_validated(tmp_path: Path) -> None:
    report = analyse_profile(GPU_DIR, {"buckets": [{"name": "gemms", "pattern": "nvjet|gemm", "ignore_case": True}],
                                       "other_bucket": "rest"})
    assert set(report.breakdown["bucket"].astype(str)) == {"gemms", "rest"}
    assert set(report.names.loc[report.names["name"].str.startswith("nvjet"), "bucket"]) == {"gemms"}
    with pytest.raises(SpeclabError, match="buckets.0.pattern"):
        analyse_profile(GPU_DIR, {"buckets": [{"name": "bad", "pattern": "("}]})
    with pytest.raises(SpeclabError, match="other_bucket"):
        analyse_profile(GPU_DIR, {"other_bucket": "attention"})
    assert ProfileParams().buckets[0].name == DEFAULT_BUCKETS[0].name
