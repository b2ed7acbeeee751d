"""A real profile of the embedded vLLM: capture a short window under load, then bucket it."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest

from speclab.profiling import analyse_profile
from speclab.profiling.capture import capture_profile
from speclab.runs import Run
from speclab.serve.target import ServerTarget, serve_target

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("vllm_lock"), pytest.mark.timeout(300)]


def test_capture_and_bucket_a_real_cpu_trace(tmp_path: Path) -> None:
    started = time.monotonic()
    server_dir = tmp_path / "server-traces"
    server_dir.mkdir()
    run = Run.create("it-profile", {}, kind="profile", run_dir=tmp_path / "run")
    with serve_target(ServerTarget(profiler_dir=str(server_dir)), run) as live:
        result = capture_profile(live, run, window_s=1.5, warmup_s=1.0, concurrency=2, max_tokens=96)
    assert result.engine == "vllm" and result.load_running_at_stop
    assert [p.parent for p in result.traces] == [run.path / "traces"] * len(result.traces)
    ranks = [p for p in result.traces if ".async_llm." not in p.name]
    assert len(ranks) == 1 and ranks[0].name.startswith("rank0.")

    report = analyse_profile(run.path / "traces")
    steps = report.steps
    assert len(steps) >= 5 and (steps["source"] == "cpu_op").all()
    assert (steps["step_kind"] == "decode").sum() >= 3
    decode = report.summary[report.summary["step_kind"] == "decode"].set_index("bucket")["share"]
    # docs/embedded-server.md: oneDNN GEMMs dominate SmolLM2 decode on this CPU
    assert decode["dense_gemm"] > 0.3
    assert decode.idxmax() == "dense_gemm"
    assert (run.path / "requests.jsonl").exists() and (run.path / "profile_capture.json").exists()
    # the load is rounds x concurrency requests (default 2 rounds), not whole categories
    assert len(pd.read_json(run.path / "requests.jsonl", lines=True)) == 2 * 2
    assert time.monotonic() - started < 240
