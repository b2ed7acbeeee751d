"""Write the SYNTHETIC /metrics fixtures that cannot be captured on this machine.

The vLLM files beside this one (``vllm_ngram_*``, ``vllm_baseline_*``) are real captures.
This script writes the two kinds no local server can produce, with prometheus_client (the
library both engines expose their metrics with) so the exposition format is the real one:

- ``vllm_old_names_{before,after}.txt``: a vLLM V1 server from before the renames
  (~0.9: ``time_per_output_token_seconds``, ``gpu_cache_usage_perc``, no
  ``request_time_per_output_token_seconds``), in multiprocess mode (no ``_created``).
  Names and labels from vLLM 0.9's ``vllm/v1/metrics/loggers.py`` and
  ``vllm/v1/spec_decode/metrics.py``.
- ``sglang_{before,after}.txt`` and ``sglang_server_info.json``: SGLang with EAGLE3
  (steps 3, topk 1, draft tokens 4) and ``--enable-metrics``, multiprocess mode. Names from
  ``python/sglang/srt/metrics/collector.py`` (newer: ``srt/observability/metrics_collector.py``).

Run from the repository root: ``.venv/bin/python tests/data/metrics/make_synthetic.py``.
The output is deterministic (seeded; creation stamps are switched off as in multiprocess).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

HERE = Path(__file__).resolve().parent

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


def _write(name: str, header: str, registry: CollectorRegistry) -> None:
    text = generate_latest(registry).decode()
    (HERE / name).write_text(f"# speclab fixture: SYNTHETIC, {header}\n{text}")


def make_vllm_old_names() -> None:
    """vLLM ~0.9 V1, ngram k=3, one engine, in multiprocess mode (no _created samples)."""
    rng = random.Random(9)
    reg = CollectorRegistry()
    ln = ["model_name", "engine"]
    lv = ("llama-3.1-8b", "0")
    k = 3
    drafts = Counter(
        "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", ln, registry=reg
    )
    draft_toks = Counter(
        "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", ln, registry=reg
    )
    accepted = Counter(
        "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", ln, registry=reg
    )
    per_pos = Counter(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "Accepted tokens per draft position.",
        ln + ["position"],
        registry=reg,
    )
    running = Gauge(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        ln,
        registry=reg,
    )
    waiting = Gauge(
        "vllm:num_requests_waiting", "Number of requests waiting to be processed.", ln, registry=reg
    )
    gpu_cache = Gauge(
        "vllm:gpu_cache_usage_perc",
        "GPU KV-cache usage. 1 means 100 percent usage.",
        ln,
        registry=reg,
    )
    pc_queries = Counter(
        "vllm:gpu_prefix_cache_queries",
        "GPU prefix cache queries, in terms of number of queried tokens.",
        ln,
        registry=reg,
    )
    pc_hits = Counter(
        "vllm:gpu_prefix_cache_hits",
        "GPU prefix cache hits, in terms of number of cached tokens.",
        ln,
        registry=reg,
    )
    preempt = Counter(
        "vllm:num_preemptions", "Cumulative number of preemption from the engine.", ln, registry=reg
    )
    prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", ln, registry=reg)
    gen = Counter(
        "vllm:generation_tokens", "Number of generation tokens processed.", ln, registry=reg
    )
    success = Counter(
        "vllm:request_success",
        "Count of successfully processed requests.",
        ln + ["finished_reason"],
        registry=reg,
    )
    ttft = Histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        ln,
        buckets=TTFT_BUCKETS,
        registry=reg,
    )
    tpot = Histogram(
        "vllm:time_per_output_token_seconds",
        "Histogram of time per output token in seconds.",
        ln,
        buckets=ITL_BUCKETS,
        registry=reg,
    )
    e2e = Histogram(
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        ln,
        buckets=REQUEST_LATENCY_BUCKETS,
        registry=reg,
    )
    queue = Histogram(
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        ln,
        buckets=REQUEST_LATENCY_BUCKETS,
        registry=reg,
    )
    # Children exist from start-up, as in vLLM (zero until used).
    for metric in (
        drafts,
        draft_toks,
        accepted,
        running,
        waiting,
        gpu_cache,
        pc_queries,
        pc_hits,
        preempt,
        prompt,
        gen,
        ttft,
        tpot,
        e2e,
        queue,
    ):
        metric.labels(*lv)
    for pos in range(k):
        per_pos.labels(*lv, str(pos))
    for reason in ("stop", "length", "abort"):
        success.labels(*lv, reason)

    # Conditional acceptance of position i given i-1 accepted.
    chain = (0.72, 0.85, 0.80)

    def serve(n_requests: int, max_tokens: int) -> None:
        for _ in range(n_requests):
            prompt_len = rng.randint(120, 260)
            prompt.labels(*lv).inc(prompt_len)
            pc_queries.labels(*lv).inc(prompt_len)
            first = rng.uniform(0.045, 0.11)
            queued = rng.uniform(0.0002, 0.002)
            queue.labels(*lv).observe(queued)
            ttft.labels(*lv).observe(queued + first)
            emitted, elapsed = 1, queued + first
            while emitted < max_tokens:
                a = 0
                while a < k and rng.random() < chain[a]:
                    a += 1
                drafts.labels(*lv).inc()
                draft_toks.labels(*lv).inc(k)
                accepted.labels(*lv).inc(a)
                for pos in range(a):
                    per_pos.labels(*lv, str(pos)).inc()
                step = rng.uniform(0.030, 0.036)
                new = min(a + 1, max_tokens - emitted)
                emitted += new
                elapsed += step
                # Pre-rename vLLM observed this once per engine step per request.
                tpot.labels(*lv).observe(step)
            gen.labels(*lv).inc(emitted)
            e2e.labels(*lv).observe(elapsed)
            success.labels(*lv, "length").inc()

    gpu_cache.labels(*lv).set(0.0)
    serve(2, 16)
    _write(
        "vllm_old_names_before.txt",
        "vLLM ~0.9 V1 names (time_per_output_token_seconds, gpu_cache_usage_perc, no "
        "request_time_per_output_token_seconds), ngram k=3, multiprocess exposition without "
        "_created; 2 warm-up requests done. Written by make_synthetic.py.",
        reg,
    )
    serve(6, 128)
    gpu_cache.labels(*lv).set(0.0)
    _write(
        "vllm_old_names_after.txt",
        "as vllm_old_names_before.txt plus 6 measured requests of 128 tokens (finish: length). "
        "Written by make_synthetic.py.",
        reg,
    )


def make_sglang() -> None:
    """SGLang EAGLE3 (steps 3, topk 1, draft tokens 4), tp 1, metrics on, multiprocess mode."""
    rng = random.Random(3)
    reg = CollectorRegistry()
    model = "meta-llama/Llama-3.1-8B-Instruct"
    tok = {"engine_type": "unified", "model_name": model}
    sched = {
        "engine_type": "unified",
        "model_name": model,
        "moe_ep_rank": "0",
        "pp_rank": "0",
        "tp_rank": "0",
    }
    draft = {**sched, "engine_type": "draft"}
    sched_names = list(sched)
    g = {
        name: Gauge(f"sglang:{name}", doc, sched_names, registry=reg)
        for name, doc in (
            ("num_running_reqs", "The number of running requests."),
            ("num_used_tokens", "The number of used tokens."),
            ("token_usage", "The token usage."),
            ("gen_throughput", "The generation throughput (token/s)."),
            ("num_queue_reqs", "The number of requests in the waiting queue."),
            ("cache_hit_rate", "The prefix cache hit rate."),
            (
                "spec_accept_length",
                (
                    "Mean acceptance length of speculative decoding "
                    "(accepted drafts + bonus token per forward)."
                ),
            ),
            (
                "spec_accept_rate",
                "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
            ),
            ("spec_num_steps", "Currently active speculative_num_steps."),
            (
                "spec_num_draft_tokens",
                "Currently active speculative_num_draft_tokens (decouples from steps under topk>1).",
            ),
        )
    }
    queue = Histogram(
        "sglang:queue_time_seconds",
        "Histogram of queueing time in seconds.",
        sched_names,
        registry=reg,
        buckets=(0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60),
    )
    tok_names = list(tok)
    prompt = Counter(
        "sglang:prompt_tokens_total", "Number of prefill tokens processed.", tok_names, registry=reg
    )
    gen = Counter(
        "sglang:generation_tokens_total",
        "Number of generation tokens processed.",
        tok_names,
        registry=reg,
    )
    verify = Counter(
        "sglang:spec_verify_calls_total",
        "Number of speculative decoding verification calls.",
        tok_names,
        registry=reg,
    )
    cached = Counter(
        "sglang:cached_tokens_total",
        "Number of cached prompt tokens.",
        tok_names + ["cache_source"],
        registry=reg,
    )
    requests = Counter(
        "sglang:num_requests_total", "Number of requests processed.", tok_names, registry=reg
    )
    aborted = Counter(
        "sglang:num_aborted_requests_total", "Number of requests aborted.", tok_names, registry=reg
    )
    ttft = Histogram(
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        tok_names,
        registry=reg,
        buckets=(0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400),
    )
    itl = Histogram(
        "sglang:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        tok_names,
        registry=reg,
        buckets=(
            0.002,
            0.004,
            0.006,
            0.008,
            0.010,
            0.015,
            0.020,
            0.025,
            0.030,
            0.035,
            0.040,
            0.060,
            0.080,
            0.100,
            0.200,
            0.400,
            0.600,
            0.800,
            1.000,
            2.000,
            4.000,
            6.000,
            8.000,
        ),
    )
    e2e = Histogram(
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
        tok_names,
        registry=reg,
        buckets=(
            0.1,
            0.2,
            0.4,
            0.6,
            0.8,
            1,
            2,
            4,
            6,
            8,
            10,
            20,
            40,
            60,
            80,
            100,
            200,
            400,
            600,
            1200,
            1800,
            2400,
        ),
    )
    # Scheduler gauges are logged from start-up (0 until the first decode batch).
    for gauge in g.values():
        gauge.labels(**sched).set(0.0)
    g["spec_num_steps"].labels(**sched).set(3)
    g["spec_num_draft_tokens"].labels(**sched).set(4)
    queue.labels(**sched)
    # SGLang creates the tokenizer-side children lazily, on the first finished request.
    totals = {"accepted_plus_bonus": 0, "verifies": 0}
    chain = (0.78, 0.70, 0.62)

    def serve(n_requests: int, max_tokens: int) -> tuple[float, float]:
        batch_len = batch_rate = 0.0
        for _ in range(n_requests):
            prompt_len = rng.randint(200, 900)
            prompt.labels(**tok).inc(prompt_len)
            cached.labels(**tok, cache_source="device").inc(rng.choice((0, 64, 128)))
            queued = rng.uniform(0.0005, 0.004)
            queue.labels(**sched).observe(queued)
            first = queued + rng.uniform(0.03, 0.09)
            ttft.labels(**tok).observe(first)
            emitted, elapsed, n_verify = 1, first, 0
            while emitted < max_tokens:
                a = 0
                while a < 3 and rng.random() < chain[a]:
                    a += 1
                step = rng.uniform(0.011, 0.014)
                new = min(a + 1, max_tokens - emitted)
                n_verify += 1
                totals["accepted_plus_bonus"] += a + 1
                totals["verifies"] += 1
                # SGLang spreads a chunk's interval over its tokens, one observation each.
                for _ in range(new):
                    itl.labels(**tok).observe(step / new)
                emitted += new
                elapsed += step
                batch_len, batch_rate = a + 1.0, a / 3
            gen.labels(**tok).inc(emitted)
            verify.labels(**tok).inc(n_verify)
            requests.labels(**tok).inc()
            e2e.labels(**tok).observe(elapsed)
        aborted.labels(**tok)
        return batch_len, batch_rate

    length, rate = serve(2, 32)
    g["spec_accept_length"].labels(**sched).set(length)
    g["spec_accept_rate"].labels(**sched).set(rate)
    g["spec_accept_length"].labels(**draft).set(0.0)
    g["spec_accept_rate"].labels(**draft).set(0.0)
    _write(
        "sglang_before.txt",
        "SGLang with --speculative-algorithm EAGLE3 --speculative-num-steps 3 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --enable-metrics, "
        "multiprocess exposition (no _created); 2 warm-up requests done. Gauges hold the last "
        'batch; engine_type="draft" rows mimic newer releases. Written by make_synthetic.py.',
        reg,
    )
    length, rate = serve(6, 256)
    g["spec_accept_length"].labels(**sched).set(length)
    g["spec_accept_rate"].labels(**sched).set(rate)
    g["gen_throughput"].labels(**sched).set(231.4)
    _write(
        "sglang_after.txt",
        "as sglang_before.txt plus 6 measured requests of 256 tokens. "
        "Written by make_synthetic.py.",
        reg,
    )
    info = {
        "_speclab_fixture": "SYNTHETIC GET /server_info of the SGLang server of sglang_after.txt "
        "(avg_spec_accept_length is cumulative since start). "
        "Written by make_synthetic.py.",
        "model_path": model,
        "speculative_algorithm": "EAGLE3",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "enable_metrics": True,
        "internal_states": [
            {
                "last_gen_throughput": 231.4,
                "avg_spec_accept_length": totals["accepted_plus_bonus"] / totals["verifies"],
                "memory_usage": {"weight": 15.06, "kvcache": 4.12, "token_capacity": 65536},
            }
        ],
        "version": "0.5.4",
    }
    (HERE / "sglang_server_info.json").write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    # Multiprocess exposition has no _created samples; match it.
    prometheus_client.disable_created_metrics()
    make_vllm_old_names()
    make_sglang()
