"""A run folder's decode timings read back (speclab.predict.timings): what the calibration counts
as a step, and which levels it leaves out (recorded float32 runs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from speclab.predict.timings import calibration_steps, spec_level_points

RUNS = Path(__file__).resolve().parents[2] / "data" / "predict"
BASE, SPEC = RUNS / "stream-f32-baseline", RUNS / "stream-f32-ngram"


def test_steps_come_from_the_stream_when_counters_over_count_accepted_tokens() -> None:
    points = spec_level_points(RUNS / "f32-baseline", RUNS / "f32-ngram")
    # the server counts drafts accepted past max_tokens, which it then drops: fewer steps
    assert (points["chunk_steps"] > points["counter_steps"]).all()
    assert points["steps"].tolist() == points["chunk_steps"].tolist() == [504.0, 599.0]


def test_a_level_the_client_stalled_through_is_left_out(tmp_path) -> None:
    stalled = tmp_path / "stalled-ngram"
    shutil.copytree(SPEC, stalled)
    summary = json.loads((stalled / "summary.json").read_text())
    summary["levels"][1]["harness"] = {**(summary["levels"][1].get("harness") or {}), "max_s": 1.5}
    (stalled / "summary.json").write_text(json.dumps(summary))
    steps = calibration_steps(BASE, stalled)
    lost = steps[steps["speculative"] & (steps["level"] == summary["levels"][1]["level"])]
    assert len(lost) > 0 and not lost["matched"].any()
