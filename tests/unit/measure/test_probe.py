"""The live verify-cost probe against a fake engine with a prefix cache, and its fit."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from speclab.errors import SpeclabError
from speclab.measure.metrics import scrape_metrics
from speclab.measure.probe import (
    CacheLayout,
    cache_layout,
    check_point,
    layout_from_server_info,
    probe_sequences,
    refuse_without_prefix_cache,
    run_head_probe,
    run_probe,
)
from speclab.options import PROBE_BUDGET_S
from speclab.predict.probefit import fit_probe, head_curve
from speclab.runfolder import HeadPoint, ProbePoint, read_points
from speclab.urls import Endpoint
from tests.fakes.fake_prefix_engine import FakePrefixEngine


def _records(n: int = 6, length: int = 70) -> list[dict]:
    return [{"request_id": f"r{i}", "ok": True, "prompt_token_ids": list(range(1000 * i, 1000 * i + 20)),
             "token_ids": list(range(1000 * i + 20, 1000 * i + length))} for i in range(n)]


def _probe(fake: FakePrefixEngine, batches=(1, 4), n_max: int = 4, repeats: int = 2, budget_s: float = PROBE_BUDGET_S):
    endpoint = Endpoint.parse(fake.url)
    with httpx.Client() as client:
        layout = cache_layout(client, endpoint, fake.engine, scrape_metrics(client, endpoint))
    sequences = probe_sequences(_records(), layout.block_size, n_max)
    return layout, run_probe(endpoint, "fake", sequences, list(batches), n_max, layout, repeats=repeats,
                             max_model_len=256, budget_s=budget_s)


def test_sequences_take_whole_blocks_of_real_tokens_and_borrow_history_when_short() -> None:
    sequences = probe_sequences(_records(length=70), block=16, n_max=4)
    assert all(s.prefix % 16 == 0 and len(s.tokens) >= s.prefix + 4 for s in sequences)
    assert sequences[0].prompt(3)[-3:] == sequences[0].tokens[sequences[0].prefix:sequences[0].prefix + 3]
    long_block = probe_sequences(_records(length=70), block=128, n_max=9)
    # 70 tokens are under one block of 128: the baseline's other sequences come first, as history
    assert all(s.prefix >= 128 and s.tokens[-50:] == list(range(int(s.request_id[1:]) * 1000 + 20,
                                                                 int(s.request_id[1:]) * 1000 + 70))
               for s in long_block)
    with pytest.raises(SpeclabError, match="no prompt and output token ids"):
        probe_sequences([{"request_id": "x", "ok": True, "token_ids": [1, 2]}], 16, 4)


def test_the_probe_recovers_a_known_verify_cost_from_a_vllm_style_engine() -> None:
    with FakePrefixEngine(block=16, base_s=0.02, per_token_s=0.004) as fake:
        layout, run = _probe(fake)
    assert layout == CacheLayout("vllm", 16, True, "/metrics cache_config_info")
    assert len(run.points) == 2 * 4 * 2 and run.refusals() == []
    assert all(p.computed_tokens == p.batch * p.tokens for p in run.points)
    assert {p.timing for p in run.points} == {"prefill_time histogram"}
    fit = fit_probe(run.points, config=None, draws=20)
    assert fit.raw_per_token_s == pytest.approx(0.004, rel=0.15)
    assert fit.head_ratio is None and any("not priced" in n for n in fit.notes)
    assert len(fit.draws) == 20 and all(d.per_token_s > 0 for d in fit.draws)


def test_an_sglang_style_engine_with_page_size_one_probes_from_its_growing_cache() -> None:
    # timed by the client here (SGLang has no prefill histogram): a per-token cost well above a
    # loaded host's scheduling jitter, so the fit reads the engine and not the host
    with FakePrefixEngine(engine="sglang", block=1, base_s=0.02, per_token_s=0.02) as fake:
        layout, run = _probe(fake, batches=(2,))
    assert layout.engine == "sglang" and layout.block_size == 1 and layout.source == "/get_server_info"
    # every probe moved the cached prefix on, so each still computed exactly B x n tokens
    assert run.refusals() == [] and all(p.computed_tokens == p.batch * p.tokens for p in run.points)
    assert {p.timing for p in run.points} == {"client latency"}
    assert fit_probe(run.points, draws=5).raw_per_token_s == pytest.approx(0.02, rel=0.3)


def test_points_the_counters_do_not_prove_are_refused_with_a_sentence() -> None:
    with FakePrefixEngine(block=16, evict=True) as fake:
        _, run = _probe(fake, batches=(1,), n_max=2, repeats=1)
    assert not run.usable() and "were computed where" in run.refusals()[0]
    # traffic that never stops: the probe waits for a quiet window only while its budget lasts
    with FakePrefixEngine(block=16, foreign=True) as fake:
        _, run = _probe(fake, batches=(2,), n_max=2, repeats=1, budget_s=3.0)
    assert not run.usable() and "foreign traffic" in run.refusals()[0]
    assert run.budget_s == 3.0 and 0 < run.waited_s <= run.budget_s + 1.0
    with pytest.raises(SpeclabError, match="left no usable point"):
        fit_probe(run.points)
    silent = check_point(ProbePoint(1, 2, 0, 0.1, "x", 0.1, 64, None, 2, True), 1)
    assert not silent.ok and "counters do not show" in str(silent.refused)


def test_a_server_without_prefix_caching_is_refused_naming_the_flag() -> None:
    with FakePrefixEngine(caching=False) as fake, httpx.Client() as client:
        endpoint = Endpoint.parse(fake.url)
        layout = cache_layout(client, endpoint, "vllm", scrape_metrics(client, endpoint))
    with pytest.raises(SpeclabError, match="--no-enable-prefix-caching"):
        refuse_without_prefix_cache(layout)
    sglang = layout_from_server_info({"page_size": 1, "disable_radix_cache": True}, "sglang")
    assert sglang is not None
    with pytest.raises(SpeclabError, match="--disable-radix-cache"):
        refuse_without_prefix_cache(sglang)
    assert layout_from_server_info({"cache_config": {"block_size": 16}}, "vllm") == CacheLayout(
        "vllm", 16, True, "/server_info cache_config")


def test_the_head_probe_measures_the_lm_head_rows_a_prefill_skips(tmp_path: Path) -> None:
    # a fake whose prompt_logprobs prefills pay 3 ms a row: verification's extra rows, which the
    # prefix probe cannot see, come out of the pairs and into the fitted verify cost
    with FakePrefixEngine(block=16, base_s=0.02, per_token_s=0.004, head_row_s=0.003) as fake:
        _, run = _probe(fake)
        saved: list[HeadPoint] = []
        pairs = run_head_probe(Endpoint.parse(fake.url), "fake", list(range(500, 700)), rows=(1, 4, 16, 64),
                               repeats=2, on_point=saved.append)
    assert len(pairs) == 8 and all(p.ok for p in pairs) and saved == pairs
    assert all(p.extra_s == pytest.approx(0.003 * p.rows, abs=0.004) for p in pairs)
    curve = head_curve(pairs)
    assert curve is not None and curve(32) == pytest.approx(0.096, rel=0.15)
    assert curve.extra_s(4, 5) == pytest.approx(0.003 * 16, rel=0.2)  # 20 rows where decode computes 4
    fit = fit_probe(run.points, draws=10, head_points=pairs)
    assert fit.raw_per_token_s == pytest.approx(0.004, rel=0.15)
    assert fit.verify.per_token_s == pytest.approx(0.007, rel=0.15)
    assert fit.head == curve
    assert fit.verify.source == "probe (+LM head measured)" and fit.head_ratio is None
    assert all(d.per_token_s == pytest.approx(0.007, rel=0.25) for d in fit.draws)
    # round trip through the run folder's file
    from speclab.runfolder import append_point
    for pair in pairs:
        append_point(tmp_path / "probe-head.jsonl", pair)
    assert read_points(tmp_path / "probe-head.jsonl", HeadPoint) == pairs


def test_head_pairs_the_counters_do_not_prove_fall_back_to_the_config_share() -> None:
    # nothing is ever cached here and every prompt is new, so a pair is refused only when the
    # cache served part of it: a curve needs three sizes, and the config then prices the head
    cached = [HeadPoint(r, 0, None, None, False, "3 of 5 tokens came from the prefix cache") for r in (1, 2, 4)]
    assert head_curve(cached) is None
    noisy = [HeadPoint(1, 0, 0.010, 0.012, True), HeadPoint(2, 0, 0.013, 0.012, True),
             HeadPoint(4, 0, 0.020, 0.012, True), HeadPoint(8, 0, 0.019, 0.012, True)]
    curve = head_curve(noisy)
    assert curve is not None and curve.cost_s[0] == 0.0  # negative noise clipped
    assert list(curve.cost_s) == sorted(curve.cost_s)  # more rows never cost less
    assert curve(16) == pytest.approx(0.016)  # past the last size: the mean slope, as noise flattened the last
    with FakePrefixEngine(block=16) as fake:
        _, run = _probe(fake, batches=(1,), n_max=3, repeats=1)
    smollm = {"hidden_size": 576, "vocab_size": 49152, "num_hidden_layers": 30, "num_attention_heads": 9,
              "num_key_value_heads": 3, "intermediate_size": 1536}
    fit = fit_probe(run.points, smollm, draws=2, head_points=cached)
    assert fit.head is None and fit.head_ratio == pytest.approx(0.2667, abs=0.001)
    assert any("made no curve" in note for note in fit.notes)


def test_the_head_probe_refuses_a_pair_the_cache_served() -> None:
    with FakePrefixEngine(block=4, head_row_s=0.001) as fake:
        # the same salt twice: the second plain prefill finds its blocks cached
        first = run_head_probe(Endpoint.parse(fake.url), "fake", list(range(100, 200)), rows=(8,), repeats=1, salt=7)
        again = run_head_probe(Endpoint.parse(fake.url), "fake", list(range(100, 200)), rows=(8,), repeats=1, salt=7)
    assert first[0].ok and not again[0].ok and "came from the prefix cache" in str(again[0].refused)
    with pytest.raises(SpeclabError, match="needs 9 real tokens"):
        run_head_probe(Endpoint.parse("http://127.0.0.1:9"), "fake", [1, 2, 3], rows=(8,))
