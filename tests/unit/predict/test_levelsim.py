"""The level simulation: continuous batching stepped through, and what it does to predictions."""

from __future__ import annotations

import pytest

from speclab.predict.levelsim import SimRequest, simulate_level


def _linear(seqs: int, context: int, drafts: int, prefill: int) -> float:
    # a step costs 1 s, +0.5 s per further sequence, +0.1 s per draft token,
    # +0.01 s per prompt token prefilled in it; context is free here
    return 1.0 + 0.5 * max(seqs - 1, 0) + 0.1 * drafts + 0.01 * prefill


def test_a_request_alone_pays_each_of_its_steps() -> None:
    sim = simulate_level([SimRequest("a", 20, [0, 3, 1])], 1, _linear, arrival_s=0.0)
    # the prefill step (1 + 0.2 s) emits the first token; three decode steps follow
    assert sim.first_token_s["a"] == pytest.approx(1.2)
    assert sim.decode_s["a"] == pytest.approx(1.0 + 1.3 + 1.1)
    assert sim.steps == 4
    assert sim.effective_batch == pytest.approx(1.0)


def test_requests_share_steps_until_the_short_one_finishes() -> None:
    sim = simulate_level([SimRequest("short", 0, [0, 0]), SimRequest("long", 0, [0, 0, 0, 0])], 2, _linear,
                         arrival_s=0.0)
    assert sim.decode_s["short"] == pytest.approx(2 * 1.5)
    assert sim.decode_s["long"] == pytest.approx(2 * 1.5 + 2 * 1.0)
    # decode seconds summed (3 + 5) over the time anyone decoded (5)
    assert sim.effective_batch == pytest.approx(8.0 / 5.0)


def test_a_newcomers_prefill_stalls_everyone_decoding() -> None:
    """Closed loop at concurrency 2: when 'a' finishes, 'c' is sent; its 100-token prefill
    is a step that 'b' waits through (1 + 0.5 s for b's decode, + 1 s of prefill)."""
    requests = [SimRequest("a", 0, [0]), SimRequest("b", 0, [0, 0, 0, 0]), SimRequest("c", 100, [0])]
    sim = simulate_level(requests, 2, _linear, arrival_s=0.001)
    # a's prompt is prefilled alone (b reaches the engine 1 ms after a); a's one decode step
    # holds b's prefill; b then decodes alone once (c has not arrived yet), then beside c's
    # prefill (1 + 1.0), then beside c decoding (1.5), then alone
    assert sim.decode_s["a"] == pytest.approx(1.01)
    assert sim.decode_s["b"] == pytest.approx(1.0 + 2.0 + 1.5 + 1.0)
    assert sim.decode_s["c"] == pytest.approx(1.5)
    # the same level with a one-token prompt: b decodes faster by the 99 tokens' prefill cost
    light = simulate_level([SimRequest("a", 0, [0]), SimRequest("b", 0, [0, 0, 0, 0]), SimRequest("c", 1, [0])], 2,
                           _linear, arrival_s=0.001)
    assert sim.decode_s["b"] - light.decode_s["b"] == pytest.approx(0.99)


def test_requests_sent_together_reach_the_engine_one_after_another() -> None:
    """A level's start: the idle engine begins a step with the first prompt alone; the other
    three arrive during it and are prefilled in the next step, which the first request decodes
    through (as every level of the benchmark's runs shows in its streams)."""
    requests = [SimRequest(i, 100, [0, 0]) for i in range(4)]
    sim = simulate_level(requests, 4, _linear, arrival_s=0.002)
    assert sim.first_token_s[0] == pytest.approx(0.002 + 2.0)
    assert all(sim.first_token_s[i] == pytest.approx(sim.first_token_s[0] + 1.0 + 3.0) for i in (1, 2, 3))
    # request 0's first decode step carries the others' 300 prompt tokens
    assert sim.decode_s[0] == pytest.approx(4.0 + 2.5)
    # sent together with no front-end delay, all four are prefilled in one step instead
    at_once = simulate_level(requests, 4, _linear, arrival_s=0.0)
    assert len(set(at_once.first_token_s.values())) == 1
    assert at_once.decode_s[0] == pytest.approx(2 * 2.5)


def test_a_prompt_over_the_token_budget_is_prefilled_over_several_steps() -> None:
    sim = simulate_level([SimRequest("long", 250, [0])], 1, _linear, budget_tokens=100, arrival_s=0.0)
    # three prefill steps (100, 100, 50 tokens), then one decode step
    assert sim.steps == 4
    assert sim.first_token_s["long"] == pytest.approx(3 * 1.0 + 2.5)


def test_context_grows_by_what_each_step_emits() -> None:
    seen: list[int] = []

    def record(seqs: int, context: int, drafts: int, prefill: int) -> float:
        if seqs:
            seen.append(context)
        return 1.0

    simulate_level([SimRequest("a", 10, [2, 2, 0], [3, 1, 1])], 1, record, arrival_s=0.0)
    # prompt + first token, then + 3, then + 1
    assert seen == [11, 14, 15]


def test_uneven_acceptance_thins_the_batch() -> None:
    """Same tokens, but one request's drafts are accepted: it finishes early, the rest decode
    alone, so the effective batch falls below the baseline's (the burst effect at c=16)."""
    tokens = 12
    baseline = [SimRequest(i, 0, [0] * tokens) for i in range(4)]
    # request 0 emits 4 tokens a step (3 steps), the others 1.5 (8 steps)
    spec = [SimRequest(0, 0, [3] * 3)] + [SimRequest(i, 0, [3] * 8) for i in range(1, 4)]
    base_sim = simulate_level(baseline, 4, _linear, arrival_s=0.0)
    spec_sim = simulate_level(spec, 4, _linear, arrival_s=0.0)
    assert base_sim.effective_batch == pytest.approx(4.0)
    assert spec_sim.effective_batch < 4.0
    # a one-token answer never decodes and leaves the level after its prefill
    one = simulate_level([SimRequest("x", 5, [])], 2, _linear)
    assert one.steps == 1 and one.decode_s["x"] == 0.0


def test_bad_concurrency_is_refused() -> None:
    with pytest.raises(ValueError):
        simulate_level([], 0, _linear)
