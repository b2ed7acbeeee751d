"""A fake engine with a block prefix cache, for the live probe's unit tests.

It keeps what a real engine's prefix cache keeps (whole blocks of prompt tokens, matched from
the start), computes only the rest of each prompt, and takes ``base_s + per_token_s * tokens``
for a step, so a probe of known cost can be checked against what the fit recovers. It speaks
vLLM (``cache_config_info``, ``prefix_cache_queries``/``hits``, ``request_prefill_time_seconds``)
or SGLang (``/get_server_info`` page size, ``prompt_tokens``/``cached_tokens``, no prefill
histogram). A request asking ``prompt_logprobs`` skips the cache, as vLLM's does, and pays
``head_row_s`` per prompt position past the first (its rows of LM-head logits). Faults: ``evict`` (nothing stays cached), ``foreign`` (someone else's request
finishes in every step), ``caching=False``.
"""

from __future__ import annotations

import json
import threading
import time

from tests.fakes.base import METRICS_TYPE, FakeHandler, FakeServer


class _Handler(FakeHandler):
    fake: FakePrefixEngine

    def do_GET(self) -> None:  # noqa: N802
        fake = self.fake
        if self.path == "/metrics":
            self._send(200, fake.metrics_text().encode(), METRICS_TYPE)
        elif self.path == "/get_server_info" and fake.engine == "sglang":
            self._send(200, json.dumps({"page_size": fake.block,
                                        "disable_radix_cache": not fake.caching}).encode())
        else:
            self._send(404, b"{}")

    def do_POST(self) -> None:  # noqa: N802
        fake = self.fake
        body = self._read_json()
        prompt = body.get("prompt") or []
        prompts = prompt if prompt and isinstance(prompt[0], list) else [prompt]
        if not body.get("stream"):
            fake.step(prompts, body.get("prompt_logprobs") is not None)
            self._send(200, json.dumps({"choices": [{"text": "x"} for _ in prompts]}).encode())
            return
        # the pacer: a decode stream, one chunk per short step, until the client leaves
        self._start_stream()
        try:
            for _ in range(int(body.get("max_tokens", 16))):
                with fake.step_lock:
                    time.sleep(fake.base_s / 4)
                self._chunk(b'data: {"choices":[{"text":"y"}]}\n\n')
            self._end_stream()
        except (BrokenPipeError, ConnectionResetError):
            pass


class FakePrefixEngine(FakeServer):
    handler = _Handler

    def __init__(self, *, engine: str = "vllm", block: int = 16, base_s: float = 0.02, per_token_s: float = 0.004,
                 caching: bool = True, evict: bool = False, foreign: bool = False, head_row_s: float = 0.0) -> None:
        self.engine, self.block, self.base_s, self.per_token_s = engine, block, base_s, per_token_s
        self.head_row_s = head_row_s
        self.caching, self.evict, self.foreign = caching, evict, foreign
        self.cached: set[tuple[int, ...]] = set()
        self.queries = self.hits = self.requests = 0
        self.prefill_sum = 0.0
        self.prefill_count = 0
        self.step_lock = threading.Lock()
        super().__init__()

    def _hit(self, prompt: list[int]) -> int:
        """Cached tokens of ``prompt``: whole blocks from the start, at least one token computed."""
        hit = 0
        while hit + self.block <= len(prompt) - 1 and tuple(prompt[:hit + self.block]) in self.cached:
            hit += self.block
        return hit

    def step(self, prompts: list[list[int]], prompt_logprobs: bool = False) -> None:
        """One engine step computing every prompt's uncached tokens (all of them, and a row of
        logits each, when ``prompt_logprobs`` is asked)."""
        with self.step_lock:
            computed = head_rows = 0
            for prompt in prompts:
                if prompt_logprobs:
                    computed += len(prompt)
                    head_rows += len(prompt) - 1
                    continue
                hit = self._hit(prompt) if self.caching else 0
                computed += len(prompt) - hit
                with self.lock:
                    self.queries += len(prompt)
                    self.hits += hit
            if self.caching and not self.evict:
                for prompt in prompts:
                    for end in range(self.block, len(prompt) + 1, self.block):
                        self.cached.add(tuple(prompt[:end]))
            took = self.base_s + self.per_token_s * computed + self.head_row_s * head_rows
            time.sleep(took)
            with self.lock:
                self.requests += len(prompts) + (1 if self.foreign else 0)
                self.prefill_sum += took * len(prompts)
                self.prefill_count += len(prompts)

    def metrics_text(self) -> str:
        with self.lock:
            q, h, r, ps, pc = self.queries, self.hits, self.requests, self.prefill_sum, self.prefill_count
        if self.engine == "sglang":
            labels = 'model_name="fake"'
            return (f"# TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total{{{labels}}} {q}\n"
                    f"# TYPE sglang:cached_tokens_total counter\nsglang:cached_tokens_total{{{labels}}} {h}\n"
                    f"# TYPE sglang:num_requests_total counter\nsglang:num_requests_total{{{labels}}} {r}\n")
        labels = 'engine="0",model_name="fake"'
        caching = "True" if self.caching else "False"
        return (
            "# TYPE vllm:cache_config_info gauge\n"
            f'vllm:cache_config_info{{block_size="{self.block}",enable_prefix_caching="{caching}",engine="0"}} 1.0\n'
            f"# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total{{{labels}}} {q}\n"
            f"# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total{{{labels}}} {h}\n"
            "# TYPE vllm:request_success_total counter\n"
            f'vllm:request_success_total{{{labels},finished_reason="length"}} {r}\n'
            "# TYPE vllm:request_prefill_time_seconds histogram\n"
            f'vllm:request_prefill_time_seconds_bucket{{{labels},le="+Inf"}} {pc}\n'
            f"vllm:request_prefill_time_seconds_count{{{labels}}} {pc}\n"
            f"vllm:request_prefill_time_seconds_sum{{{labels}}} {ps}\n")
