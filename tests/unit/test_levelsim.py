"""The level simulation: continuous batching stepped through, and what it does to predictions."""

from __future__ import annotations

import pytest

from speclab.levelsim import SimRequest, simulate_level


def _linear(batch: int, extra: int) -> float:
    # a step costs 1 s, +0.5 s per further sequence, +0.1 s per extra verified token
    return 1.0 + 0.5 * (batch - 1) + 0.1 * extra


def test_a_request_alone_pays_each_of_its_steps() -> None:
    sim = simulate_level([SimRequest("a", 0.2, [0, 3, 1])], 1, _linear)
    assert sim.decode_s["a"] == pytest.approx(1.0 + 1.3 + 1.1)
    assert sim.steps == 3
    assert sim.effective_batch == pytest.approx(1.0)


def test_requests_share_steps_until_the_short_one_finishes() -> None:
    sim = simulate_level([SimRequest("short", 0.0, [0, 0]), SimRequest("long", 0.0, [0, 0, 0, 0])], 2, _linear)
    assert sim.decode_s["short"] == pytest.approx(2 * 1.5)
    assert sim.decode_s["long"] == pytest.approx(2 * 1.5 + 2 * 1.0)
    # decode seconds summed (3 + 5) over the time anyone decoded (5)
    assert sim.effective_batch == pytest.approx(8.0 / 5.0)


def test_closed_loop_takes_a_slot_when_one_frees_and_waits_for_first_token() -> None:
    sim = simulate_level([SimRequest("a", 0.0, [0, 0]), SimRequest("b", 0.5, [0])], 1, _linear)
    assert sim.decode_s == {"a": pytest.approx(2.0), "b": pytest.approx(1.0)}
    assert sim.steps == 3  # never together: b starts after a, and its first token takes 0.5 s


def test_uneven_acceptance_thins_the_batch() -> None:
    """Same tokens, but one request's drafts are accepted: it finishes early, the rest decode
    alone, so the effective batch falls below the baseline's (the burst effect at c=16)."""
    tokens = 12
    baseline = [SimRequest(i, 0.0, [0] * tokens) for i in range(4)]
    # request 0 emits 4 tokens a step (3 steps), the others 1.5 (8 steps)
    spec = [SimRequest(0, 0.0, [3] * 3)] + [SimRequest(i, 0.0, [3] * 8) for i in range(1, 4)]
    base_sim = simulate_level(baseline, 4, _linear)
    spec_sim = simulate_level(spec, 4, _linear)
    assert base_sim.effective_batch == pytest.approx(4.0)
    assert spec_sim.effective_batch < 4.0
    # a one-token answer never decodes and leaves the level as if it had not been sent
    assert simulate_level([SimRequest("x", 0.0, [])], 2, _linear).steps == 0


def test_bad_concurrency_is_refused() -> None:
    with pytest.raises(ValueError):
        simulate_level([], 0, _linear)
