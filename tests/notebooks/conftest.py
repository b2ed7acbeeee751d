"""One smoke 01-baseline run for every notebook test that needs a finished baseline."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def smoke_baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 01-baseline run with its smoke params (real server, real calibration).

    Made once per session under the vLLM lock; tests that repeat it pass ``baseline_run``.
    """
    from speclab.cli.workbook import run_notebook

    outputs = tmp_path_factory.mktemp("baseline-outputs")
    with open("/tmp/speclab-vllm.lock", "w") as handle:  # the vllm_lock fixture's lock, session-wide
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            return run_notebook("01-baseline", [str(ROOT / "params/01-baseline/smoke.yaml")], [],
                                outputs_root=str(outputs))
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
