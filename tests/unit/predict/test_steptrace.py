"""Engine steps read back from streamed chunks (speclab.predict.steptrace)."""

from __future__ import annotations

import math

from speclab.predict.steptrace import StepPlan, level_steps, run_steps


def _record(request_id: str, send: float, prompt: int, at: list[float], tokens: list[int] | None = None,
            level: int = 0) -> dict:
    return {"request_id": request_id, "level": level, "concurrency": 2, "send_time_s": send, "prompt_tokens": prompt,
            "chunk_offsets_s": [t - send for t in at], "chunk_tokens": tokens or [1] * len(at), "ok": True}


# two requests at concurrency 2: r2 arrives while r1 decodes, and its prefill shares r1's third step
R1 = _record("r1", 0.0, 10, [0.10, 0.20, 0.30, 0.40])
R2 = _record("r2", 0.15, 50, [0.3003, 0.4002, 0.50])


def test_chunks_cluster_into_steps_with_who_decoded_and_who_was_prefilled() -> None:
    steps = level_steps([R1, R2])
    assert steps["end_s"].round(2).tolist() == [0.10, 0.20, 0.30, 0.40, 0.50]
    assert math.isnan(steps["duration_s"].iloc[0])
    assert steps["duration_s"].iloc[1:].round(3).tolist() == [0.1, 0.1, 0.1, 0.1]
    assert steps["decode_seqs"].tolist() == [0, 1, 1, 2, 1]
    assert steps["prefills"].tolist() == [1, 0, 1, 0, 0]
    assert steps["prefill_tokens"].tolist() == [10, 0, 50, 0, 0]
    # context: the prompt and every token emitted before the step
    assert steps["context_tokens"].tolist() == [0, 11, 12, 13 + 51, 52]
    assert steps["matched"].all()


def test_a_speculative_runs_drafts_are_matched_chunk_by_chunk() -> None:
    spec_r1 = _record("r1", 0.0, 10, [0.10, 0.20, 0.30], [1, 3, 1])
    plans = {"r1": StepPlan([4, 2], [3, 1])}
    steps = level_steps([spec_r1], plans)
    assert steps["draft_tokens"].tolist() == [0, 4, 2]
    assert steps["emitted_tokens"].tolist() == [0, 3, 1]
    assert steps["context_tokens"].tolist() == [0, 11, 14]
    assert steps["matched"].all()
    # a replay that disagrees with what the stream carried is not trusted for those steps
    wrong = level_steps([spec_r1], {"r1": StepPlan([4, 2], [2, 2])})
    assert not wrong["matched"].any()


def test_merged_chunks_of_a_baseline_are_not_trusted() -> None:
    merged = _record("r1", 0.0, 10, [0.10, 0.20, 0.40], [1, 1, 2])
    assert not level_steps([merged])["matched"].any()


def test_a_client_stall_reads_a_burst_that_is_not_taken_for_engine_steps() -> None:
    # steps every 0.1 s, then the client stalls: four chunks queue up and are read at 1.0 s
    at = [0.1, 0.2, 0.3, 0.4, 1.0, 1.0001, 1.0002, 1.0003, 1.1, 1.2]
    steps = level_steps([_record("r1", 0.0, 10, at)])
    assert len(steps) == len(at)  # one request: every chunk is a step of its own
    flagged = steps.loc[~steps["matched"], "end_s"].round(4).tolist()
    assert flagged == [1.0, 1.0001, 1.0002, 1.0003]
    assert steps.loc[steps["matched"], "duration_s"].dropna().round(3).tolist() == [0.1, 0.1, 0.1, 0.1, 0.1]


def test_run_steps_reads_every_level_and_skips_failed_requests() -> None:
    failed = {**_record("bad", 0.0, 5, [0.05, 0.07]), "ok": False}
    other = _record("r3", 0.0, 5, [0.1, 0.2], level=1)
    steps = run_steps([R1, R2, failed, other])
    assert steps.groupby("level").size().to_dict() == {0: 5, 1: 2}
