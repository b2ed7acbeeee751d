"""speclab.measure.metrics: snapshots, deltas, renamed metrics, resets, foreign traffic, scraping.

Fixtures in tests/data/metrics: ``vllm_ngram_*`` and ``vllm_baseline_*`` are real captures
from vLLM 0.32 on this project's CPU server; ``vllm_old_names_*`` and ``sglang_*`` are
synthetic (tests/data/metrics/make_synthetic.py). Each file's first line says which.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

from speclab.errors import SpeclabError
from speclab.measure.metrics import (
    CounterWindow,
    MetricsSnapshot,
    ascrape_metrics,
    foreign_traffic,
    parse_metrics,
    parse_sglang_server_info,
    scrape_metrics,
    spec_decode_info,
    window,
)
from speclab.urls import Endpoint

DATA = Path(__file__).resolve().parents[2] / "data" / "metrics"
LV = 'engine="0",model_name="m"'


def load(name: str, taken_at: float) -> MetricsSnapshot:
    return parse_metrics((DATA / name).read_text(), taken_at, source=name)


def client_record() -> dict:
    return json.loads((DATA / "vllm_ngram_client.json").read_text())


def spec_text(
    drafts: float, draft_tokens: float, accepted: float, per_pos: dict[int, float]
) -> str:
    """vLLM spec counters as prometheus_client writes them, positions in the given order."""
    lines = [
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f"vllm:spec_decode_num_drafts_total{{{LV}}} {drafts}",
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        f"vllm:spec_decode_num_draft_tokens_total{{{LV}}} {draft_tokens}",
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        f"vllm:spec_decode_num_accepted_tokens_total{{{LV}}} {accepted}",
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
    ]
    for pos, value in per_pos.items():
        lines.append(
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LV},position="{pos}"}} {value}'
        )
    return "\n".join(lines) + "\n"


# --- parsing ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(DATA.glob("*.txt")), ids=lambda p: p.name)
def test_every_fixture_parses_and_says_how_it_was_made(path: Path) -> None:
    text = path.read_text()
    assert text.startswith("# "), "each fixture starts with a comment line saying how it was made"
    snap = parse_metrics(text, 0.0)
    assert snap.engine in ("vllm", "sglang")


def test_parse_keeps_exact_sample_names_and_ignores_created() -> None:
    snap = load("vllm_ngram_after.txt", 1.0)
    assert "vllm:spec_decode_num_drafts" in snap.families
    assert snap.has("vllm:spec_decode_num_drafts_total")
    assert snap.has("vllm:spec_decode_num_drafts_created")
    # One series; the _created stamp (~1.8e9) must not be added to the count.
    assert snap.total("vllm:spec_decode_num_drafts_total") == 40.0
    assert snap.total("vllm:request_success_total") == 7.0
    assert snap.total("vllm:request_success_total", finished_reason="length") == 2.0
    assert snap.total("vllm:request_success_total", finished_reason="nonsense") is None
    assert snap.total("vllm:no_such_metric_total") is None
    assert snap.engine == "vllm"


def test_parse_defaults_taken_at_to_perf_counter() -> None:
    start = time.perf_counter()
    snap = parse_metrics("vllm:generation_tokens_total 1\n")
    assert start <= snap.taken_at <= time.perf_counter()


@pytest.mark.parametrize(
    "body",
    ["<html><body>Not Found</body></html>", '{"detail":"Not Found"}', "Internal Server Error"],
)
def test_bad_text_is_one_clear_error(body: str) -> None:
    with pytest.raises(SpeclabError) as err:
        parse_metrics(body, 0.0, source="http://h:8000/metrics")
    assert err.value.message.startswith(
        "The /metrics response from http://h:8000/metrics is not Prometheus text;"
    )


def test_empty_text_is_an_error() -> None:
    with pytest.raises(SpeclabError, match="is empty"):
        parse_metrics("  \n", 0.0)


def test_openmetrics_exposition_is_understood() -> None:
    text = (
        "# TYPE vllm:spec_decode_num_drafts counter\n"
        f"vllm:spec_decode_num_drafts_total{{{LV}}} 12.0\n"
        f"vllm:spec_decode_num_drafts_created{{{LV}}} 1.7e9\n"
        "# EOF\n"
    )
    snap = parse_metrics(text, 0.0)
    assert snap.total("vllm:spec_decode_num_drafts_total") == 12.0


# --- acceptance from deltas ---------------------------------------------------------------


def test_acceptance_comes_from_deltas_not_cumulative_counters() -> None:
    before, after = load("vllm_ngram_before.txt", 10.0), load("vllm_ngram_after.txt", 12.5)
    w = window(before, after)

    def d(name: str) -> float:
        return after.total(name) - before.total(name)

    d_drafts = d("vllm:spec_decode_num_drafts_total")
    d_tokens = d("vllm:spec_decode_num_draft_tokens_total")
    d_accepted = d("vllm:spec_decode_num_accepted_tokens_total")
    assert before.total("vllm:spec_decode_num_drafts_total") > 0, "warm-up is in the counters"
    assert (w.d_drafts, w.d_draft_tokens, w.d_accepted_tokens) == (d_drafts, d_tokens, d_accepted)
    assert w.acceptance_rate == pytest.approx(d_accepted / d_tokens)
    assert w.mean_acceptance_length == pytest.approx(1 + d_accepted / d_drafts)
    cumulative = after.total("vllm:spec_decode_num_accepted_tokens_total") / after.total(
        "vllm:spec_decode_num_draft_tokens_total"
    )
    assert w.acceptance_rate != pytest.approx(cumulative)
    assert w.acceptance_source == "counters"
    assert w.window_s == pytest.approx(2.5)
    assert w.counters_reset is False


def test_real_window_matches_what_the_client_sent() -> None:
    record = client_record()
    w = window(load("vllm_ngram_before.txt", 0.0), load("vllm_ngram_after.txt", 1.0))
    assert w.d_requests == record["client_requests"]
    assert w.d_generation_tokens == record["client_output_tokens"]
    assert w.d_prompt_tokens == record["client_prompt_tokens"]
    assert foreign_traffic(w, record["client_requests"], record["client_output_tokens"]) is False


def test_per_position_rates_are_ordered_by_number_with_10_after_9() -> None:
    k = 12
    order = [10, 2, 0, 11, 1, 9, 3, 4, 5, 6, 7, 8]  # "10" < "2" as text
    before = parse_metrics(spec_text(0, 0, 0, {p: 0 for p in order}), 0.0)
    after_counts = {p: float(100 - 5 * p) for p in order}
    accepted = sum(after_counts.values())
    after = parse_metrics(spec_text(100, 100 * k, accepted, after_counts), 1.0)
    w = window(before, after)
    assert w.d_accepted_per_position == tuple(100 - 5 * p for p in range(k))
    assert w.per_position_rates == pytest.approx([(100 - 5 * p) / 100 for p in range(k)])
    assert spec_decode_info(after).num_positions == k


def test_accepted_tokens_is_not_confused_with_accepted_tokens_per_pos() -> None:
    # Deliberately inconsistent numbers: a prefix match would mix the two counters.
    before = parse_metrics(spec_text(10, 40, 20, {0: 9, 1: 6, 2: 4, 3: 1}), 0.0)
    after = parse_metrics(spec_text(30, 120, 50, {0: 25, 1: 17, 2: 12, 3: 3}), 1.0)
    w = window(before, after)
    assert w.d_accepted_tokens == 30
    assert w.d_accepted_per_position == (16, 11, 8, 2)
    assert w.mean_acceptance_length == pytest.approx(1 + 30 / 20)
    real = window(load("vllm_ngram_before.txt", 0.0), load("vllm_ngram_after.txt", 1.0))
    assert real.d_accepted_tokens == sum(real.d_accepted_per_position)


def test_no_drafts_in_window_gives_none_not_nan() -> None:
    snap = load("vllm_ngram_after.txt", 0.0)
    w = window(snap, parse_metrics((DATA / "vllm_ngram_after.txt").read_text(), 5.0))
    assert w.d_drafts == 0
    assert w.acceptance_rate is None and w.mean_acceptance_length is None
    assert w.per_position_rates is None
    assert w.server_ttft_s_mean is None


def test_latency_means_are_window_histogram_means() -> None:
    before, after = load("vllm_ngram_before.txt", 0.0), load("vllm_ngram_after.txt", 1.0)
    w = window(before, after)
    base = "vllm:request_time_per_output_token_seconds"
    expected = (after.total(base + "_sum") - before.total(base + "_sum")) / (
        after.total(base + "_count") - before.total(base + "_count")
    )
    assert w.server_tpot_s_mean == pytest.approx(expected)
    # Under speculation a step emits several tokens: per-step ITL exceeds per-token TPOT.
    assert w.server_itl_s_mean > w.server_tpot_s_mean
    for value in (w.server_ttft_s_mean, w.server_e2e_s_mean, w.server_queue_s_mean):
        assert value is not None and value >= 0


# --- renamed metrics and spellings --------------------------------------------------------


def test_pre_rename_vllm_names_are_understood() -> None:
    before, after = load("vllm_old_names_before.txt", 0.0), load("vllm_old_names_after.txt", 3.0)
    assert not after.has("vllm:inter_token_latency_seconds_count")
    assert not after.has("vllm:spec_decode_num_drafts_created")  # multiprocess: no _created
    w = window(before, after)
    assert w.server_itl_s_mean is not None  # from vllm:time_per_output_token_seconds
    assert w.server_tpot_s_mean is None  # per-request TPOT did not exist yet
    assert w.kv_cache_usage_after == 0.0  # from vllm:gpu_cache_usage_perc
    assert w.d_requests == 6 and w.d_generation_tokens == 6 * 128
    assert w.acceptance_source == "counters"
    assert spec_decode_info(after).num_positions == 3


def test_old_and_new_itl_spellings_side_by_side_are_not_summed() -> None:
    def text(new_sum: float, old_sum: float, count: float) -> str:
        return (
            "# TYPE vllm:inter_token_latency_seconds histogram\n"
            f"vllm:inter_token_latency_seconds_sum{{{LV}}} {new_sum}\n"
            f"vllm:inter_token_latency_seconds_count{{{LV}}} {count}\n"
            "# TYPE vllm:time_per_output_token_seconds histogram\n"
            f"vllm:time_per_output_token_seconds_sum{{{LV}}} {old_sum}\n"
            f"vllm:time_per_output_token_seconds_count{{{LV}}} {count}\n"
        )

    w = window(parse_metrics(text(0, 0, 0), 0.0), parse_metrics(text(2.0, 9.0, 100), 1.0))
    assert w.server_itl_s_mean == pytest.approx(0.02)  # the new name wins, alone


def test_counters_exposed_without_total_suffix() -> None:
    def text(drafts: int, tokens: int, accepted: int) -> str:
        return (
            f"vllm:spec_decode_num_drafts {drafts}\n"
            f"vllm:spec_decode_num_draft_tokens {tokens}\n"
            f"vllm:spec_decode_num_accepted_tokens {accepted}\n"
        )

    w = window(parse_metrics(text(5, 20, 10), 0.0), parse_metrics(text(15, 60, 34), 1.0))
    assert (w.d_drafts, w.d_draft_tokens, w.d_accepted_tokens) == (10, 40, 24)
    assert w.mean_acceptance_length == pytest.approx(3.4)


# --- speculation on or off ----------------------------------------------------------------


def test_baseline_has_no_spec_counters() -> None:
    before, after = load("vllm_baseline_before.txt", 0.0), load("vllm_baseline_after.txt", 1.0)
    assert spec_decode_info(after).enabled is False
    assert spec_decode_info(after).num_positions is None
    assert not any(name.startswith("vllm:spec_decode") for name, _ in after.samples)
    w = window(before, after)
    assert (w.d_drafts, w.acceptance_rate, w.mean_acceptance_length) == (None, None, None)
    assert w.acceptance_source is None
    assert w.d_generation_tokens == client_record()["client_output_tokens"]  # same greedy run
    assert w.server_itl_s_mean == pytest.approx(w.server_tpot_s_mean, rel=0.25)


def test_speculation_on_is_proven_by_the_counters() -> None:
    info = spec_decode_info(load("vllm_ngram_before.txt", 0.0))
    assert (info.enabled, info.num_positions, info.engine) == (True, 4, "vllm")
    assert spec_decode_info(parse_metrics("up 1\n", 0.0)).enabled is False


# --- resets -------------------------------------------------------------------------------


def test_server_restart_between_snapshots_flags_a_reset() -> None:
    # Real: the ngram server's last snapshot, then a freshly started server.
    w = window(load("vllm_ngram_after_extra.txt", 0.0), load("vllm_baseline_before.txt", 60.0))
    assert w.counters_reset is True
    assert w.d_requests is None and w.d_generation_tokens is None
    assert w.acceptance_rate is None and w.server_ttft_s_mean is None
    assert w.requests_running_after == 0.0  # gauges still describe the end of the window
    assert foreign_traffic(w, 5, 100) is None


def test_restart_that_overtook_the_old_counts_is_caught_by_created() -> None:
    def text(drafts: float, created: float) -> str:
        return (
            "# TYPE vllm:spec_decode_num_drafts_total counter\n"
            f"vllm:spec_decode_num_drafts_total{{{LV}}} {drafts}\n"
            "# TYPE vllm:spec_decode_num_drafts_created gauge\n"
            f"vllm:spec_decode_num_drafts_created{{{LV}}} {created}\n"
        )

    w = window(parse_metrics(text(100, 1.7e9), 0.0), parse_metrics(text(150, 1.8e9), 1.0))
    assert w.counters_reset is True and w.d_drafts is None
    same = window(parse_metrics(text(100, 1.7e9), 0.0), parse_metrics(text(150, 1.7e9), 1.0))
    assert same.counters_reset is False and same.d_drafts == 50


def test_a_counter_going_down_is_a_reset_never_a_negative_delta() -> None:
    before = parse_metrics(spec_text(50, 200, 120, {0: 40, 1: 30, 2: 30, 3: 20}), 0.0)
    after = parse_metrics(spec_text(8, 32, 20, {0: 7, 1: 6, 2: 4, 3: 3}), 1.0)
    w = window(before, after)
    assert w.counters_reset is True
    assert all(
        v is None
        for k, v in w.to_dict().items()
        if k.startswith("d_") or k in ("acceptance_rate", "mean_acceptance_length")
    )


def test_snapshots_out_of_order_or_from_two_engines_are_refused() -> None:
    a, b = load("vllm_ngram_before.txt", 5.0), load("vllm_ngram_after.txt", 1.0)
    with pytest.raises(SpeclabError, match="in order"):
        window(a, b)
    with pytest.raises(SpeclabError, match="different engines"):
        window(load("vllm_ngram_before.txt", 0.0), load("sglang_after.txt", 1.0))


# --- foreign traffic ----------------------------------------------------------------------


def test_foreign_traffic_from_another_clients_request() -> None:
    record = client_record()
    w = window(load("vllm_ngram_before.txt", 0.0), load("vllm_ngram_after_extra.txt", 1.0))
    assert w.d_requests == record["client_requests"] + 1
    assert foreign_traffic(w, record["client_requests"], record["client_output_tokens"]) is True


def test_foreign_traffic_tolerance_and_missing_counters() -> None:
    w = CounterWindow(
        engine="vllm", window_s=1.0, counters_reset=False, d_requests=10, d_generation_tokens=1005
    )
    assert foreign_traffic(w, 10, 1000) is False  # within 1 %
    assert foreign_traffic(w, 10, 1000, tolerance=0.0) is True
    assert foreign_traffic(w, 9, 1005) is True  # one request more than sent
    assert foreign_traffic(w, 12, 1100) is False  # fewer: still running, not foreign
    bare = CounterWindow(engine=None, window_s=1.0, counters_reset=False)
    assert foreign_traffic(bare, 10, 1000) is None


# --- SGLang -------------------------------------------------------------------------------


def test_sglang_acceptance_from_verify_counter_and_gauges_at_after() -> None:
    before, after = load("sglang_before.txt", 0.0), load("sglang_after.txt", 8.0)
    w = window(before, after)
    d_gen = w.d_generation_tokens
    assert w.engine == "sglang" and w.d_requests == 6 and d_gen == 6 * 256
    assert w.mean_acceptance_length == pytest.approx((d_gen - w.d_requests) / w.d_spec_verify_calls)
    assert w.acceptance_rate == pytest.approx((w.mean_acceptance_length - 1) / 3)
    assert w.acceptance_source == "counters"
    # Gauges are the target's value at `after`; the draft engine's row (0.0) is ignored.
    assert w.sglang_spec_accept_length_after == after.total(
        "sglang:spec_accept_length", engine_type="unified"
    )
    assert w.sglang_spec_accept_length_after > 0
    assert w.server_ttft_s_mean and w.server_itl_s_mean and w.server_e2e_s_mean
    assert w.server_queue_s_mean is not None and w.server_tpot_s_mean is None
    info = spec_decode_info(after)
    assert (info.enabled, info.num_positions, info.engine) == (True, 3, "sglang")


def test_sglang_without_verify_counter_falls_back_to_gauges() -> None:
    def strip(name: str, t: float) -> MetricsSnapshot:
        lines = (DATA / name).read_text().splitlines()
        keep = [ln for ln in lines if "spec_verify_calls" not in ln and "spec_num_steps" not in ln]
        return parse_metrics("\n".join(keep) + "\n", t)

    after = strip("sglang_after.txt", 1.0)
    w = window(strip("sglang_before.txt", 0.0), after)
    assert w.acceptance_source == "gauge"
    assert w.mean_acceptance_length == w.sglang_spec_accept_length_after
    assert w.acceptance_rate == w.sglang_spec_accept_rate_after
    assert spec_decode_info(after).num_positions is None


def test_sglang_counters_created_lazily_count_from_zero() -> None:
    labels = 'engine_type="unified",model_name="m"'
    fresh = parse_metrics(f'sglang:num_running_reqs{{{labels},tp_rank="0"}} 0\n', 0.0)
    after = parse_metrics(
        "# TYPE sglang:generation_tokens_total counter\n"
        f"sglang:generation_tokens_total{{{labels}}} 300\n"
        "# TYPE sglang:num_requests_total counter\n"
        f"sglang:num_requests_total{{{labels}}} 3\n",
        1.0,
    )
    w = window(fresh, after)
    assert (w.counters_reset, w.d_generation_tokens, w.d_requests) == (False, 300, 3)


def test_parse_sglang_server_info_all_spellings() -> None:
    fixture = (DATA / "sglang_server_info.json").read_text()
    assert 1.0 < parse_sglang_server_info(fixture) < 4.0
    assert parse_sglang_server_info({"avg_spec_accept_length": 2.5}) == 2.5  # older top level
    two_ranks = {
        "internal_states": [{"avg_spec_accept_length": 3.0}, {"avg_spec_accept_length": 2.0}]
    }
    assert parse_sglang_server_info(two_ranks) == 2.5
    assert parse_sglang_server_info({"internal_states": [{"last_gen_throughput": 1.0}]}) is None
    assert parse_sglang_server_info({"internal_states": [{"avg_spec_accept_length": None}]}) is None
    with pytest.raises(SpeclabError, match="not JSON"):
        parse_sglang_server_info("<html>")


# --- to_dict --------------------------------------------------------------------------------


def test_to_dict_has_unit_suffixed_keys_and_is_json_ready() -> None:
    record = window(load("vllm_ngram_before.txt", 0.0), load("vllm_ngram_after.txt", 1.0)).to_dict()
    for key in (
        "server_ttft_s_mean",
        "server_tpot_s_mean",
        "server_e2e_s_mean",
        "server_itl_s_mean",
        "server_queue_s_mean",
        "acceptance_rate",
        "mean_acceptance_length",
        "per_position_acceptance",
        "d_requests",
        "d_generation_tokens",
        "d_prompt_tokens",
        "window_s",
        "counters_reset",
    ):
        assert key in record
    assert isinstance(record["per_position_acceptance"], list)
    assert len(record["per_position_acceptance"]) == 4
    json.dumps(record)


# --- scraping -----------------------------------------------------------------------------


def _transport(seen: list[httpx.Request], status: int = 200, body: str | None = None):
    text = (DATA / "vllm_ngram_after.txt").read_text() if body is None else body

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            status, text=text, headers={"content-type": "text/plain; version=1.0.0; charset=utf-8"}
        )

    return httpx.MockTransport(handler)


def test_scrape_hits_metrics_at_the_root_even_for_a_v1_base_url() -> None:
    seen: list[httpx.Request] = []
    with httpx.Client(transport=_transport(seen)) as client:
        start = time.perf_counter()
        snap = scrape_metrics(client, Endpoint.parse("http://gpu-box:8000/v1/"))
        end = time.perf_counter()
    assert [str(r.url) for r in seen] == ["http://gpu-box:8000/metrics"]
    assert seen[0].headers["accept"].startswith("text/plain")
    assert start <= snap.taken_at <= end
    assert snap.source == "http://gpu-box:8000/metrics"
    assert spec_decode_info(snap).num_positions == 4


def test_scrape_accepts_a_plain_url_string() -> None:
    seen: list[httpx.Request] = []
    with httpx.Client(transport=_transport(seen)) as client:
        scrape_metrics(client, "127.0.0.1:30000/v1")
    assert str(seen[0].url) == "http://127.0.0.1:30000/metrics"


def test_ascrape_hits_metrics_at_the_root() -> None:
    seen: list[httpx.Request] = []

    async def go() -> MetricsSnapshot:
        async with httpx.AsyncClient(transport=_transport(seen)) as client:
            return await ascrape_metrics(client, Endpoint.parse("http://h:8000/v1"))

    snap = asyncio.run(go())
    assert str(seen[0].url) == "http://h:8000/metrics"
    assert snap.total("vllm:generation_tokens_total") == 183.0


@pytest.mark.parametrize(
    ("status", "body", "needle"),
    [
        (404, '{"detail":"Not Found"}', "--enable-metrics"),
        (500, "Internal Server Error", "HTTP 500"),
        (200, "<html>oops</html>", "is not Prometheus text"),
    ],
)
def test_scrape_http_problems_are_one_sentence(status: int, body: str, needle: str) -> None:
    client = httpx.Client(transport=_transport([], status, body))
    with client, pytest.raises(SpeclabError) as err:
        scrape_metrics(client, Endpoint.parse("http://h:8000"))
    assert needle in err.value.message
    assert "http://h:8000/metrics" in err.value.message


def test_scrape_unreachable_server_is_one_sentence() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused", request=request)

    client = httpx.Client(transport=httpx.MockTransport(refuse))
    with client, pytest.raises(SpeclabError, match="Could not read http://h:8000/metrics"):
        scrape_metrics(client, Endpoint.parse("http://h:8000"))


def test_steps_that_computed_more_than_one_token_are_counted_from_the_iteration_histogram() -> None:
    from speclab.measure.metrics import multi_token_steps, parse_metrics

    def snap(count: float, ones: float) -> object:
        return parse_metrics(
            "# TYPE vllm:iteration_tokens_total histogram\n"
            f'vllm:iteration_tokens_total_bucket{{engine="0",le="1.0"}} {ones}\n'
            f'vllm:iteration_tokens_total_bucket{{engine="0",le="+Inf"}} {count}\n'
            f'vllm:iteration_tokens_total_count{{engine="0"}} {count}\n'
            f'vllm:iteration_tokens_total_sum{{engine="0"}} {count * 3}\n')

    # a pacer decoding one token a step for 6 steps, and one step that prefilled the probe's prompts
    assert multi_token_steps(snap(100, 90), snap(107, 96)) == 1
    # the prompts split over two steps
    assert multi_token_steps(snap(100, 90), snap(108, 96)) == 2
    # SGLang publishes no such histogram: not checked
    other = parse_metrics("# TYPE sglang:num_requests_total counter\nsglang:num_requests_total 3\n")
    assert multi_token_steps(other, other) is None
