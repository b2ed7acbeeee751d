"""Traffic replay on a local multi-worker Ray instance: the same rows as in one process."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from speclab.paths import server_python
from speclab.traffic.gen import write_log
from speclab.traffic.replay import iter_options, read_log_replay, replay_log
from speclab.traffic.tokens import ChatTokenizer
from tests.fakes.tiny_tokenizer import write_tiny_model

pytestmark = pytest.mark.integration


def test_ray_with_two_workers_gives_the_single_process_rows(tmp_path: Path, vllm_lock: None) -> None:
    log = write_log(tmp_path / "log.jsonl", 400, seed=7)  # text: tokenised inside the Ray tasks
    tokenizer = ChatTokenizer.from_folder(write_tiny_model(tmp_path / "model"))
    options = iter_options([2, 4], [8])
    python = str(server_python()) if server_python().exists() else None
    kwargs = {"tokenizer": tokenizer, "batch_size": 50, "progress": False, "suffix_python": python}
    single = replay_log(log, tmp_path / "single", options, **kwargs)
    on_ray = replay_log(log, tmp_path / "ray", options, workers=2, **kwargs)
    assert on_ray.stats["engine"] == "ray" and single.stats["engine"] == "single process"
    pd.testing.assert_frame_equal(single.requests, on_ray.requests)
    assert len(on_ray.requests) == 400 * 3 and on_ray.requests["accepted_tokens"].sum() > 0
    # the batches really ran in Ray worker processes, not in this one (how many of the two
    # workers got batches depends on their start-up on a loaded machine)
    import json

    pids = {json.loads(p.read_text())["stats"]["pid"] for p in (tmp_path / "ray" / "batches").glob("*.json")}
    assert pids and os.getpid() not in pids
    assert read_log_replay(tmp_path / "ray").stats["batches"] == 8


def test_a_ray_address_runs_the_replay_on_that_cluster(tmp_path: Path, vllm_lock: None) -> None:
    """`--ray-address`: a Ray head started apart (here on loopback, two CPUs) runs the batches,
    with speclab shipped to its workers, and gives the single-process rows."""
    import shutil
    import subprocess
    import sys

    from speclab.serve.launch import free_port

    ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent))
    if ray_cli is None:
        pytest.skip("the ray command is not installed beside this python")
    port = free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    subprocess.run([ray_cli, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
                    "--include-dashboard=false", "--disable-usage-stats"],
                   check=True, env=env, timeout=180, capture_output=True)
    try:
        log = write_log(tmp_path / "log.jsonl", 120, seed=3)
        tokenizer = ChatTokenizer.from_folder(write_tiny_model(tmp_path / "model"))
        options = iter_options([4], [])
        kwargs = {"tokenizer": tokenizer, "batch_size": 40, "progress": False}
        single = replay_log(log, tmp_path / "single", options, **kwargs)
        remote = replay_log(log, tmp_path / "cluster", options, ray_address=f"127.0.0.1:{port}", **kwargs)
        assert remote.stats["engine"] == "ray"
        pd.testing.assert_frame_equal(single.requests, remote.requests)
    finally:
        import ray

        if ray.is_initialized():  # a driver still attached when its cluster stops is killed with it
            ray.shutdown()
        subprocess.run([ray_cli, "stop", "--force"], env=env, timeout=120, capture_output=True)
