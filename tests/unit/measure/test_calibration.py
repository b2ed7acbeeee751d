"""The verify-cost calibration's baseline arm measured on a running server, and found again."""

from __future__ import annotations

from pathlib import Path

import pytest

from speclab.errors import SpeclabError
from speclab.measure.calibration import (
    BASELINE_ON_LIVE,
    finished_calibration_baseline,
    measure_calibration_baseline,
)
from speclab.runs import Run
from speclab.serve.embedded import embedded_option
from speclab.serve.target import ServerTarget
from speclab.sweep import SweepConfig


def _arm(root: Path, status: str, plan: bool = True) -> Path:
    run = Run.create(BASELINE_ON_LIVE, {}, kind="bench", run_dir=root / BASELINE_ON_LIVE)
    if plan:
        (run.path / "plan.json").write_text("{}")
    run.finalize(status)
    return run.path


def test_a_finished_baseline_arm_is_found(tmp_path: Path) -> None:
    assert finished_calibration_baseline(tmp_path) is None  # nothing there yet
    assert finished_calibration_baseline(tmp_path / "missing") is None
    path = _arm(tmp_path, "ok")
    assert finished_calibration_baseline(tmp_path) == path


@pytest.mark.parametrize(("status", "plan"), [("failed", True), ("interrupted", True), ("ok", False)])
def test_an_unfinished_baseline_arm_is_measured_again(tmp_path: Path, status: str, plan: bool) -> None:
    _arm(tmp_path, status, plan)
    assert finished_calibration_baseline(tmp_path) is None


def test_the_baseline_arm_needs_a_server_without_speculation(tmp_path: Path) -> None:
    target = ServerTarget(option=embedded_option("ngram"))
    with pytest.raises(SpeclabError, match="speculation off"):
        measure_calibration_baseline(object(), target, SweepConfig(concurrency=[1]), outputs_root=tmp_path)
    assert not (tmp_path / BASELINE_ON_LIVE).exists()  # refused before a run folder is made
