"""Traffic replay on a local multi-worker Ray instance: the same rows as in one process."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from speclab.paths import server_python
from speclab.traffic_gen import write_log
from speclab.traffic_replay import iter_options, read_log_replay, replay_log
from speclab.traffic_tokens import ChatTokenizer
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
