"""Acceptance replay: vLLM 0.32's n-gram proposer and counters on sequences with known answers."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from speclab.options import SpecOption
from speclab.paths import server_python
from speclab.predict.replay import (
    ReplayStep,
    baseline_requests,
    ngram_propose,
    ngram_settings,
    replay_ngram_tokens,
    replay_run,
    replay_suffix,
    summarise_steps,
)

DATA = Path(__file__).parents[2] / "data" / "predict"
NGRAM = SpecOption(method="ngram", num_speculative_tokens=4, prompt_lookup_min=2, prompt_lookup_max=4)


# --------------------------------------------------------------------------- the proposer


def test_repeated_span_drafts_what_followed_it() -> None:
    context = [5, 6, 7, 8, 9, 1, 2, 5, 6]
    assert ngram_propose(context, 2, 4, 4) == [7, 8, 9, 1]


def test_no_match_no_draft() -> None:
    assert ngram_propose(list(range(20)), 2, 4, 4) == []
    assert ngram_propose([1], 2, 4, 4) == []  # shorter than min_n


def test_longest_match_wins_over_an_earlier_shorter_one() -> None:
    # [1,2] occurs first at 1 (followed by 7); [0,1,2] occurs at 4 (followed by 9)
    context = [3, 1, 2, 7, 0, 1, 2, 9, 0, 1, 2]
    assert ngram_propose(context, 2, 4, 4) == [9, 0, 1, 2]


def test_equal_length_matches_earliest_occurrence_wins() -> None:
    context = [1, 2, 9, 5, 1, 2, 8, 1, 2]
    assert ngram_propose(context, 2, 4, 4) == [9, 5, 1, 2]


def test_overlapping_matches_and_k_longer_than_what_follows() -> None:
    # every suffix of a run of one token matches at the start; the earliest 4-gram
    # match leaves only one token after it
    assert ngram_propose([7, 7, 7, 7, 7], 2, 4, 4) == [7]
    # a 2-token period: the earliest [1,2,1,2] leaves [1,2]... then stops at the context end
    assert ngram_propose([1, 2, 1, 2, 1, 2], 2, 4, 4) == [1, 2]
    # the match right before the suffix leaves fewer than k tokens
    assert ngram_propose([4, 4, 5, 6, 4, 5, 6], 2, 3, 8) == [4, 5, 6]


def test_min_and_max_lookup_bounds() -> None:
    context = [1, 2, 5, 1, 2]
    assert ngram_propose(context, 2, 4, 4) == [5, 1, 2]
    assert ngram_propose(context, 3, 4, 4) == []  # only a 2-gram matches
    # max_n caps the match length: with 3 the [0,1,2] match wins, with 2 the earliest [1,2]
    context = [1, 2, 7, 0, 1, 2, 9, 0, 1, 2]
    assert ngram_propose(context, 2, 3, 4) == [9, 0, 1, 2]
    assert ngram_propose(context, 2, 2, 4) == [7, 0, 1, 2]
    assert ngram_propose(context, 1, 1, 2) == [7, 0]  # single-token lookup


def test_max_model_len_caps_the_draft() -> None:
    context = [5, 6, 7, 8, 9, 1, 2, 5, 6]
    assert ngram_propose(context, 2, 4, 4, max_model_len=11) == [7, 8]
    assert ngram_propose(context, 2, 4, 4, max_model_len=9) == []


def _brute_force(context: list[int], min_n: int, max_n: int, k: int) -> list[int]:
    total = len(context)
    for n in range(min(max_n, total - 1), min_n - 1, -1):
        suffix = context[total - n:]
        for start in range(0, total - n):
            if context[start:start + n] == suffix:
                return context[start + n:start + n + k]
    return []


def test_port_agrees_with_a_brute_force_reading_of_the_rule() -> None:
    rng = random.Random(0)
    for _ in range(3000):
        context = [rng.randrange(3) for _ in range(rng.randrange(1, 30))]
        lo = rng.randrange(1, 4)
        hi = rng.randrange(lo, 6)
        k = rng.randrange(1, 7)
        assert ngram_propose(context, lo, hi, k) == _brute_force(context, lo, hi, k), (context, lo, hi, k)


@pytest.mark.skipif(not server_python().exists(), reason="vLLM's server venv is not installed")
def test_port_agrees_with_vllms_own_function() -> None:
    rng = random.Random(1)
    cases = []
    for _ in range(400):
        context = [rng.randrange(4) for _ in range(rng.randrange(1, 40))]
        lo = rng.randrange(1, 4)
        cases.append((context, lo, rng.randrange(lo, 6), rng.randrange(1, 7)))
    script = (
        "import json, sys, numpy as np\n"
        "from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens as f\n"
        "cases = json.load(sys.stdin)\n"
        "print(json.dumps([f(np.array(c, dtype=np.int32), lo, hi, 2048, k).tolist() for c, lo, hi, k in cases]))\n"
    )
    result = subprocess.run([str(server_python()), "-c", script], input=json.dumps(cases),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    theirs = json.loads(result.stdout.strip().splitlines()[-1])
    mine = [ngram_propose(c, lo, hi, k) for c, lo, hi, k in cases]
    assert mine == theirs


def test_settings_follow_vllm_defaults() -> None:
    assert ngram_settings(NGRAM) == (2, 4, 4)
    assert ngram_settings(SpecOption(method="ngram", num_speculative_tokens=3)) == (5, 5, 3)
    assert ngram_settings(SpecOption(method="ngram", num_speculative_tokens=3, prompt_lookup_max=3)) == (3, 3, 3)


# --------------------------------------------------------------------------- steps and counters


def test_replay_of_a_copied_prompt() -> None:
    prompt = list(range(10, 20))
    output = list(range(10, 20)) + [99]
    steps = replay_ngram_tokens(prompt, output, 2, 4, 4)
    # pos 1: [19,10] never occurred -> plain step; pos 2: [10,11] matches -> 4 accepted + bonus;
    # pos 7: draft [17,18,19,10], the output has 99 where 10 was drafted -> 3 accepted
    assert steps == [ReplayStep(1, 0, 0, 1), ReplayStep(2, 4, 4, 5), ReplayStep(7, 4, 3, 4)]
    row = summarise_steps(steps, 4)
    assert row["decode_steps"] == 3 and row["decode_tokens"] == len(output) - 1
    assert (row["drafts"], row["draft_tokens"], row["accepted_tokens"]) == (2, 8, 7)
    assert [row[f"accepted_pos{i}"] for i in range(1, 5)] == [2, 2, 2, 1]
    assert row["acceptance_rate"] == pytest.approx(7 / 8)
    assert row["mean_acceptance_length"] == pytest.approx(1 + 7 / 2)
    assert row["acceptance_pos4"] == pytest.approx(0.5)
    assert row["draft_fraction"] == pytest.approx(2 / 3)
    assert row["verified_tokens_per_step"] == pytest.approx((3 + 8) / 3)


def test_no_match_means_one_token_steps_and_no_drafts_counted() -> None:
    steps = replay_ngram_tokens([1, 2, 3], [4, 5, 6, 7], 2, 4, 4)
    assert [s.draft_tokens for s in steps] == [0, 0, 0]
    row = summarise_steps(steps, 4)
    assert row["drafts"] == 0 and row["acceptance_rate"] is None and row["mean_acceptance_length"] is None
    assert row["tokens_per_step"] == 1.0


def test_a_draft_running_past_the_recorded_output_is_reported() -> None:
    steps = replay_ngram_tokens(list(range(10, 20)), [10, 11, 12, 13], 2, 4, 4)
    assert steps[-1] == ReplayStep(2, 4, 2, 2, draft_tokens_past_output=2)
    assert summarise_steps(steps, 4)["draft_tokens_past_output"] == 2


def test_rejected_first_draft_token_still_emits_the_correction() -> None:
    # the draft after [1,2] is [3,4,1,2] but the model wrote 8
    steps = replay_ngram_tokens([1, 2, 3, 4], [1, 2, 8, 9], 2, 4, 4)
    assert steps[1] == ReplayStep(2, 4, 0, 1)
    assert sum(s.emitted_tokens for s in steps) == 3


# --------------------------------------------------------------------------- a real run


def test_replay_of_a_recorded_run_reproduces_the_servers_counters() -> None:
    """Recorded on the embedded vLLM 0.32 (float32): baseline, then ngram k=4 on the same plan."""
    result = replay_run(DATA / "f32-baseline", NGRAM)
    assert "vllm 0.32" in result.proposer_impl and "return_token_ids" in result.token_source
    levels = result.by_level().set_index("level")
    summary = json.loads((DATA / "f32-ngram" / "summary.json").read_text())["levels"]
    for level in summary:
        server = level["server_counters"]
        mine = levels.loc[level["level"]]
        assert mine["drafts"] == server["d_drafts"]
        assert mine["draft_tokens"] == server["d_draft_tokens"]
        # the server also compared drafts with tokens past max_tokens, which it never returns
        assert mine["accepted_tokens"] <= server["d_accepted_tokens"]
        assert server["d_accepted_tokens"] <= mine["accepted_tokens"] + mine["draft_tokens_past_output"]
    cats = result.by_category()
    assert set(cats["category"]) == {"code_editing", "math_reasoning", "multi_turn", "summarization"}
    assert cats.set_index("category").loc["code_editing", "acceptance_rate"] > 0.6


def test_baseline_requests_refuses_runs_without_token_ids(tmp_path: Path) -> None:
    from speclab.errors import SpeclabError

    rows = [json.loads(line) for line in (DATA / "f32-baseline" / "requests.jsonl").read_text().splitlines()]
    rows[0].pop("token_ids")
    (tmp_path / "requests.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(SpeclabError, match="token ids"):
        baseline_requests(tmp_path)


def test_suffix_replay_fallback_runs_and_counts() -> None:
    requests = baseline_requests(DATA / "f32-baseline")
    result = replay_suffix(requests, SpecOption(method="suffix", num_speculative_tokens=8), implementation="speclab")
    assert result.proposer_impl.startswith("speclab")
    overall = result.overall()
    assert overall["drafts"] > 0 and 0 < overall["acceptance_rate"] < 1
    assert overall["decode_tokens"] == int((requests["output_tokens"] - 1).sum())
    # the proposer's own calls are timed, per sequence and step that drafted
    assert result.proposer_us_per_seq_step is not None and result.proposer_us_per_seq_step > 0


@pytest.mark.skipif(not server_python().exists(), reason="arctic-inference lives in the server venv")
def test_suffix_replay_with_arctic_inference_is_close_to_the_fallback() -> None:
    requests = baseline_requests(DATA / "f32-baseline")
    option = SpecOption(method="suffix", num_speculative_tokens=8)
    real = replay_suffix(requests, option)
    if not real.proposer_impl.startswith("arctic"):
        pytest.skip("arctic-inference is not importable in the server venv")
    mine = replay_suffix(requests, option, implementation="speclab").overall()
    theirs = real.overall()
    assert abs(mine["acceptance_rate"] - theirs["acceptance_rate"]) < 0.05
    # the real cache's calls take microseconds per sequence and step (12 us on the 2-core
    # host, docs/predictor.md): far under a millisecond
    assert real.proposer_us_per_seq_step is not None and 0 < real.proposer_us_per_seq_step < 1000
    assert abs(mine["drafts"] / theirs["drafts"] - 1) < 0.05
