"""MoE routing models, distinct experts, the verify-cost line and the expert budget (speclab.moe.models)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from speclab.errors import SpeclabError
from speclab.moe.models import (
    RoutingModel,
    RoutingSample,
    VerifyCurve,
    apply_budget,
    budget_sweep,
    distinct_experts_uniform,
    distinct_from_inclusion,
    fit_routing,
    loaded_per_step,
    parse_routing,
    sample_routing,
    simulate_distinct,
    trace_distinct_curve,
)
from tests.unit.moe.helpers import linear_curve


@pytest.mark.parametrize(("experts", "top_k"), [(384, 8), (64, 8), (128, 4)])
def test_uniform_closed_form_matches_simulation(experts: int, top_k: int) -> None:
    ns = [1, 2, 4, 8, 16]
    sim = simulate_distinct(RoutingModel(experts, top_k), ns, samples=600, seed=3)
    closed = distinct_experts_uniform(np.array(ns), experts, top_k)
    np.testing.assert_allclose(sim["distinct_experts"], closed, rtol=0.02)
    assert sim["distinct_experts"].iloc[0] == top_k  # one token: exactly its k experts


def test_closed_form_values_for_kimi() -> None:
    # 384 experts, top-8: 8, 15.8, 31.0, 59.5 for n = 1, 2, 4, 8
    got = distinct_experts_uniform(np.array([1, 2, 4, 8]), 384, 8)
    np.testing.assert_allclose(got, [8.0, 15.833, 31.014, 59.523], atol=0.01)
    # the same from per-expert inclusion probabilities K/E
    np.testing.assert_allclose(distinct_from_inclusion(np.full(384, 8 / 384), [1, 2, 4, 8]), got)


def test_skew_and_adjacent_correlation_touch_fewer_experts() -> None:
    ns = [1, 2, 4, 8]
    uniform = simulate_distinct(RoutingModel(384, 8), ns, samples=300)["distinct_experts"].to_numpy()
    zipf = simulate_distinct(RoutingModel(384, 8, zipf_s=1.0), ns, samples=300)["distinct_experts"].to_numpy()
    sticky = simulate_distinct(RoutingModel(384, 8, rho=0.8), ns, samples=300)["distinct_experts"].to_numpy()
    assert (np.diff(zipf) > 0).all() and (np.diff(sticky) > 0).all()
    assert (zipf[1:] < uniform[1:]).all() and (sticky[1:] < uniform[1:]).all()
    # rho 0.8 is near Cohere's "4 adjacent tokens load ~2.5x the experts of one"
    assert 2.2 < sticky[2] / sticky[0] < 2.9


def test_sampled_routes_are_distinct_top_k_and_probabilities() -> None:
    rng = np.random.default_rng(0)
    draw = sample_routing(RoutingModel(32, 4, 1.0, 0.5), 10, rng)[0]
    assert draw.ids.shape == (10, 4)
    assert all(len(set(row)) == 4 for row in draw.ids.tolist())
    np.testing.assert_allclose(draw.probs.sum(axis=1), 1.0, rtol=1e-5)
    # each token's top-k are its k most probable experts
    top = np.sort(np.argsort(-draw.probs, axis=1)[:, :4], axis=1)
    np.testing.assert_array_equal(top, np.sort(draw.ids, axis=1))


def test_parse_routing_and_bad_values() -> None:
    model = parse_routing("zipf1.5+rho0.3", 64, 8)
    assert (model.zipf_s, model.rho) == (1.5, 0.3)
    assert parse_routing("uniform", 64, 8).zipf_s == 0
    with pytest.raises(SpeclabError, match="not uniform, zipfS"):
        parse_routing("pareto2", 64, 8)
    with pytest.raises(SpeclabError, match="top_k"):
        RoutingModel(4, 8)
    with pytest.raises(SpeclabError, match="rho"):
        RoutingModel(64, 8, rho=1.0)


def test_verify_curve_recovers_a_known_line() -> None:
    curve = linear_curve(0.01, 0.05)
    assert curve.fixed_s == pytest.approx(0.01, rel=1e-6)
    assert curve.per_expert_s == pytest.approx(0.05, rel=1e-6)
    assert curve.per_token_s == pytest.approx(0.0, abs=1e-9)
    assert curve.multiplier(8, 1) == pytest.approx(1.0)
    assert curve.fit_table()["residual_pct"].abs().max() < 1e-6


def test_verify_curve_token_term_comes_from_saturated_steps() -> None:
    rows = [{"routing": "uniform", "tokens": n, "distinct_experts": d, "step_s": 0.05 * d + 0.002 * max(n - d / 8, 0)}
            for n, d in [(1, 8), (2, 16), (4, 31), (8, 59.5), (256, 384), (512, 384), (1024, 384)]]
    curve = VerifyCurve(pd.DataFrame(rows), top_k=8, experts=384)
    assert curve.per_expert_s == pytest.approx(0.05, rel=0.02)
    assert curve.per_token_s > 0.001
    # noisy, collinear points (tokens rise with experts) still give a positive expert slope
    noisy = pd.DataFrame([{"routing": r, "tokens": n, "distinct_experts": d, "step_s": t}
                          for r, n, d, t in [("uniform", 1, 8, 0.21e-3), ("uniform", 4, 30, 1.09e-3),
                                             ("zipf1.0", 1, 8, 0.19e-3), ("zipf1.0", 4, 25, 0.83e-3)]])
    assert VerifyCurve(noisy, top_k=8, experts=128).per_expert_s > 0


def test_budget_equal_to_all_experts_is_no_budget() -> None:
    rng = np.random.default_rng(1)
    for draw in sample_routing(RoutingModel(64, 8, 1.0, 0.3), 5, rng, layers=20):
        for strategy in ("substitution", "truncation"):
            result = apply_budget(draw, 64, strategy)
            assert result.experts_loaded == result.experts_unbudgeted
            assert result.topk_kept == 1.0 and result.mass_kept == pytest.approx(1.0)


def test_budget_of_k_costs_a_one_token_step() -> None:
    curve = linear_curve()
    table = budget_sweep(RoutingModel(384, 8, 1.0), 5, [8, 384], curve=curve, samples=50)
    at_k = table[table["budget"] == 8]
    assert (at_k["experts_loaded"] == 8).all()
    assert at_k["verify_cost_x"].to_numpy() == pytest.approx([1.0, 1.0])
    no_budget = table[table["budget"] == 384]
    assert (no_budget["verify_cost_x"] == no_budget["verify_cost_unbudgeted_x"]).all()
    assert (no_budget["verify_cost_x"] > 3.0).all()  # ~31 experts for 5 uniform-ish tokens


def test_substitution_keeps_k_experts_and_more_mass_than_truncation() -> None:
    probs = np.array([[0.5, 0.3, 0.1, 0.1], [0.1, 0.1, 0.3, 0.5]])
    draw = RoutingSample(ids=np.array([[0, 1], [3, 2]]), probs=probs)
    # mass per expert: 0.6, 0.4, 0.4, 0.6 -> B=2 keeps experts 0 and 3
    sub = apply_budget(draw, 2, "substitution")
    trunc = apply_budget(draw, 2, "truncation")
    assert sub.experts_loaded == trunc.experts_loaded == 2 and sub.experts_unbudgeted == 4
    assert trunc.topk_kept == 0.5
    assert trunc.mass_kept == pytest.approx((0.5 + 0.5) / 1.6)
    assert sub.mass_kept == pytest.approx((0.5 + 0.1 + 0.5 + 0.1) / 1.6)
    with pytest.raises(SpeclabError, match="substitution"):
        apply_budget(draw, 2, "drop")  # type: ignore[arg-type]


def test_loaded_per_step_unions_sequences_and_caps_by_budget() -> None:
    model = RoutingModel(384, 8)
    one = loaded_per_step(model, 1, 1.0, samples=200)
    assert one == pytest.approx(8.0)
    batch = loaded_per_step(model, 16, 1.0, samples=200)
    assert batch == pytest.approx(distinct_experts_uniform(16, 384, 8), rel=0.03)
    capped = loaded_per_step(model, 1, 5.0, budget=8, samples=200)
    assert capped == pytest.approx(8.0)
    assert loaded_per_step(model, 1, 2.5, samples=200) == pytest.approx(
        (loaded_per_step(model, 1, 2.0, samples=200) + loaded_per_step(model, 1, 3.0, samples=200)) / 2)


def test_fit_recovers_independent_uniform_routing() -> None:
    rng = np.random.default_rng(4)
    routes = np.stack([draw.ids for draw in sample_routing(RoutingModel(64, 8), 300, rng, layers=3)], axis=1)
    curve = trace_distinct_curve(routes, [1, 2, 4, 8])
    fit = fit_routing(curve, 64, 8, samples=80)
    assert fit.model.rho == 0.0 and fit.model.zipf_s <= 0.25
    assert fit.error < 0.03


def test_trace_curve_needs_three_dimensions() -> None:
    with pytest.raises(SpeclabError, match="tokens, layers, top_k"):
        trace_distinct_curve(np.zeros((4, 8)), [1, 2])
