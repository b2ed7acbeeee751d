"""A log replayed in batches (speclab.traffic.replay): acceptance by category, resuming, the options."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from speclab.errors import SpeclabError
from speclab.traffic.day import acceptance_by
from speclab.traffic.gen import write_log
from speclab.traffic.replay import ReplayOption, iter_options, read_log_replay, replay_log


def test_copy_heavy_categories_accept_more_than_chat(tmp_path: Path) -> None:
    log = write_log(tmp_path / "ids.jsonl", 800, seed=2, ids=True)
    replay = replay_log(log, tmp_path / "run", iter_options([4], []), batch_size=400, progress=False)
    by_cat = acceptance_by(replay.requests, ["category"]).set_index("category")["acceptance_rate"]
    assert by_cat["code-edit"] > by_cat["summarise"] > by_cat["chat"]


def test_replay_resumes_from_finished_batches_and_pins_settings(tmp_path: Path) -> None:
    log = write_log(tmp_path / "ids.jsonl", 300, seed=3, ids=True)
    options = iter_options([2, 4], [])
    first = replay_log(log, tmp_path / "run", options, batch_size=100, progress=False)
    assert first.stats["skipped_batches"] == 0 and first.stats["batches"] == 3
    (tmp_path / "run" / "batches" / "batch-000001.parquet").unlink()
    again = replay_log(log, tmp_path / "run", options, batch_size=100, progress=False)
    assert again.stats["skipped_batches"] == 2
    pd.testing.assert_frame_equal(first.requests, again.requests)
    assert len(again.requests) == 600 and set(again.requests["option"]) == {o.label for o in options}
    with pytest.raises(SpeclabError, match="batch_size"):
        replay_log(log, tmp_path / "run", options, batch_size=50, progress=False)
    assert read_log_replay(tmp_path / "run").rows == 300


def test_replay_option_labels_and_vllm_lookup_defaults() -> None:
    assert ReplayOption(method="ngram", k=4, prompt_lookup_min=2, prompt_lookup_max=4).label == "ngram k=4 (2..4)"
    assert ReplayOption(method="ngram", k=3).lookup() == (5, 5)
    assert ReplayOption(method="ngram", k=3, prompt_lookup_max=3).lookup() == (3, 3)
    with pytest.raises(ValueError):
        ReplayOption(method="ngram", k=3, prompt_lookup_min=4, prompt_lookup_max=2)
