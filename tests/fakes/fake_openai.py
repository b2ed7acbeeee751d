"""A small OpenAI-compatible streaming server with vLLM-style /metrics, for unit tests.

Fault injection and harness tests only: measurements always use the real embedded vLLM.
Each chat request streams ``tokens_per_request`` tokens in chunks of ``tokens_per_chunk``
with continuous usage, then a usage chunk and [DONE]; /metrics counts requests and
generation tokens like vLLM does (plus ``extra_tokens`` to simulate another tenant).
The routes, the stream's shape and the thread it is served from are tests/fakes/base.py's.
"""

from __future__ import annotations

import time
from typing import Any

from tests.fakes.base import FakeServer, OpenAIHandler


class _Handler(OpenAIHandler):
    fake: FakeOpenAI

    def _chat(self, body: dict[str, Any]) -> None:
        fake = self.fake
        with fake.lock:
            fake.bodies.append(body)
            number = len(fake.bodies)
        if fake.fail_every and number % fake.fail_every == 0:
            self._send(500, b'{"error": {"message": "injected failure"}}')
            return
        total = min(int(body.get("max_tokens") or fake.tokens_per_request), fake.tokens_per_request)
        self._start_stream()
        sent = 0
        while sent < total:
            n = min(fake.tokens_per_chunk, total - sent)
            sent += n
            time.sleep(fake.delay_s)
            self._token_event("x" * n, sent, sent == total)
        self._finish_stream(total)


class FakeOpenAI(FakeServer):
    handler = _Handler

    def __init__(self, tokens_per_request: int = 12, tokens_per_chunk: int = 2, delay_s: float = 0.002,
                 fail_every: int = 0) -> None:
        self.tokens_per_request = tokens_per_request
        self.tokens_per_chunk = tokens_per_chunk
        self.delay_s = delay_s
        self.fail_every = fail_every
        self.extra_requests = 0
        self.bodies: list[dict] = []
        super().__init__()

    def metrics_text(self) -> str:
        return self.request_counters(extra_requests=self.extra_requests, described=True)
