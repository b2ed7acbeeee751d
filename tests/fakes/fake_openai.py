"""A small OpenAI-compatible streaming server with vLLM-style /metrics, for unit tests.

Fault injection and harness tests only: measurements always use the real embedded vLLM.
Each chat request streams ``tokens_per_request`` tokens in chunks of ``tokens_per_chunk``
with continuous usage, then a usage chunk and [DONE]; /metrics counts requests and
generation tokens like vLLM does (plus ``extra_tokens`` to simulate another tenant).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeOpenAI:
    def __init__(self, tokens_per_request: int = 12, tokens_per_chunk: int = 2, delay_s: float = 0.002,
                 fail_every: int = 0) -> None:
        self.tokens_per_request = tokens_per_request
        self.tokens_per_chunk = tokens_per_chunk
        self.delay_s = delay_s
        self.fail_every = fail_every
        self.requests = 0
        self.generation_tokens = 0
        self.extra_requests = 0
        self.bodies: list[dict] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def metrics_text(self) -> str:
        with self.lock:
            requests = self.requests + self.extra_requests
            tokens = self.generation_tokens
        labels = 'engine="0",model_name="fake"'
        return (
            "# HELP vllm:request_success_total Count of successfully processed requests.\n"
            "# TYPE vllm:request_success_total counter\n"
            f'vllm:request_success_total{{{labels},finished_reason="length"}} {float(requests)}\n'
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
            "# TYPE vllm:generation_tokens_total counter\n"
            f"vllm:generation_tokens_total{{{labels}}} {float(tokens)}\n"
        )

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                if self.path == "/health":
                    self._send(200, b"")
                elif self.path == "/metrics":
                    self._send(200, fake.metrics_text().encode(), "text/plain; version=0.0.4")
                elif self.path == "/v1/models":
                    self._send(200, json.dumps({"data": [{"id": "fake", "max_model_len": 4096}]}).encode())
                elif self.path == "/version":
                    self._send(200, b'{"version": "0.0-fake"}')
                else:
                    self._send(404, b'{"error": "not found"}')

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path == "/reset_prefix_cache":
                    self._send(200, b"")
                    return
                if self.path != "/v1/chat/completions":
                    self._send(404, b'{"error": "not found"}')
                    return
                with fake.lock:
                    fake.bodies.append(body)
                    number = len(fake.bodies)
                if fake.fail_every and number % fake.fail_every == 0:
                    self._send(500, b'{"error": {"message": "injected failure"}}')
                    return
                total = min(int(body.get("max_tokens") or fake.tokens_per_request), fake.tokens_per_request)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def event(obj: dict | str) -> None:
                    data = obj if isinstance(obj, str) else json.dumps(obj)
                    payload = f"data: {data}\n\n".encode()
                    self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
                    self.wfile.flush()

                sent = 0
                while sent < total:
                    n = min(fake.tokens_per_chunk, total - sent)
                    sent += n
                    time.sleep(fake.delay_s)
                    event({"choices": [{"index": 0, "delta": {"content": "x" * n},
                                        "finish_reason": "length" if sent == total else None}],
                           "usage": {"prompt_tokens": 5, "completion_tokens": sent, "total_tokens": 5 + sent}})
                event({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": total,
                                                 "total_tokens": 5 + total}})
                event("[DONE]")
                self.wfile.write(b"0\r\n\r\n")
                with fake.lock:
                    fake.requests += 1
                    fake.generation_tokens += total

        return Handler
