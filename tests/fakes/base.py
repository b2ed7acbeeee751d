"""The one base of the suite's fake servers (fault injection and harness tests only: every
measured figure in speclab comes from the real embedded vLLM).

- ``QuietHandler``: a request handler that logs nothing and answers whole bodies (``_send``);
  the fake engine process (``fake_engine.py``) answers its ``/health`` with it.
- ``FakeHandler``: HTTP/1.1 keep-alive, the JSON request body, and a chunked SSE stream
  (``_start_stream``, ``_chunk``, ``_event``, ``_token_event``, ``_finish_stream``, ``_end_stream``)
  shaped like vLLM's (continuous usage, a usage chunk, then ``data: [DONE]``).
- ``OpenAIHandler``: the routes vLLM's OpenAI server answers: ``/health``, ``/metrics``,
  ``/v1/models``, ``/version``, ``/reset_prefix_cache``; a chat request goes to ``_chat``, and
  ``_authorised`` may refuse any request first.
- ``FakeServer``: one of those handlers served on 127.0.0.1 and a free port from a thread:
  ``with Fake(...) as server: ... server.url ...``; the handler reaches it as ``self.fake``.

``FakeOpenAI`` (fake_openai.py), ``FakePrefixEngine`` (fake_prefix_engine.py) and
``FaultServer`` (tests/faults/fault_server.py) subclass these.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

METRICS_TYPE = "text/plain; version=0.0.4"
LABELS = 'engine="0",model_name="fake"'


def vllm_request_counters(requests: int, tokens: int, *, described: bool = False) -> str:
    """vLLM's finished-request and generated-token counters in the exposition format (with their
    ``# HELP`` lines when ``described``)."""

    def head(name: str, text: str) -> str:
        return (f"# HELP {name} {text}\n" if described else "") + f"# TYPE {name} counter\n"

    return (
        head("vllm:request_success_total", "Count of successfully processed requests.")
        + f'vllm:request_success_total{{{LABELS},finished_reason="length"}} {float(requests)}\n'
        + head("vllm:generation_tokens_total", "Number of generation tokens processed.")
        + f"vllm:generation_tokens_total{{{LABELS}}} {float(tokens)}\n"
    )


class QuietHandler(BaseHTTPRequestHandler):
    """Logs nothing; ``_send`` answers one whole body."""

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class FakeHandler(QuietHandler):
    """HTTP/1.1, a JSON body in, a chunked SSE stream out; ``fake`` is the server it serves."""

    protocol_version = "HTTP/1.1"
    fake: Any

    def _read_json(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, payload: bytes) -> None:
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    def _event(self, obj: dict[str, Any] | str) -> None:
        data = obj if isinstance(obj, str) else json.dumps(obj)
        self._chunk(f"data: {data}\n\n".encode())

    def _token_event(self, content: str, sent: int, last: bool) -> None:
        """A chat chunk carrying ``content``, with the usage so far (``sent`` tokens)."""
        self._event({"choices": [{"index": 0, "delta": {"content": content},
                                  "finish_reason": "length" if last else None}],
                     "usage": {"prompt_tokens": 5, "completion_tokens": sent, "total_tokens": 5 + sent}})

    def _finish_stream(self, total: int) -> None:
        """The usage chunk, ``[DONE]`` and the end of the body; the server counts the request."""
        self._event({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": total,
                                              "total_tokens": 5 + total}})
        self._event("[DONE]")
        self._end_stream()
        self.fake.count_finished(total)


class OpenAIHandler(FakeHandler):
    """The routes of vLLM's OpenAI server; a chat request's body goes to ``_chat``."""

    def _authorised(self) -> bool:
        return True

    def _chat(self, body: dict[str, Any]) -> None:
        raise NotImplementedError

    def do_GET(self) -> None:  # noqa: N802
        if not self._authorised():
            return
        if self.path == "/health":
            self._send(200, b"")
        elif self.path == "/metrics":
            self._send(200, self.fake.metrics_text().encode(), METRICS_TYPE)
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"data": [{"id": "fake", "max_model_len": 4096}]}).encode())
        elif self.path == "/version":
            self._send(200, json.dumps({"version": self.fake.version}).encode())
        else:
            self._send(404, b'{"error": "not found"}')

    def do_POST(self) -> None:  # noqa: N802
        body = self._read_json()
        if not self._authorised():
            return
        if self.path == "/reset_prefix_cache":
            self._send(200, b"")
            return
        if self.path != "/v1/chat/completions":
            self._send(404, b'{"error": "not found"}')
            return
        self._chat(body)


class FakeServer:
    """``handler`` served on 127.0.0.1 and a free port, from a daemon thread while in ``with``."""

    handler: type[FakeHandler] = FakeHandler
    server_class: type[ThreadingHTTPServer] = ThreadingHTTPServer
    poll_interval_s = 0.5  # serve_forever's own default
    version = "0.0-fake"

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.completed = 0  # streams finished whole, as vLLM's request_success_total counts them
        self.generation_tokens = 0
        bound = type(self.handler.__name__, (self.handler,), {"fake": self})
        self.server = self.server_class(("127.0.0.1", 0), bound)
        self.server.daemon_threads = True
        self.port: int = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": self.poll_interval_s}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def count_finished(self, tokens: int) -> None:
        with self.lock:
            self.completed += 1
            self.generation_tokens += tokens

    def request_counters(self, *, extra_requests: int = 0, described: bool = False) -> str:
        """vLLM's request and token counters of what this server finished (plus ``extra_requests``
        someone else's)."""
        with self.lock:
            requests, tokens = self.completed + extra_requests, self.generation_tokens
        return vllm_request_counters(requests, tokens, described=described)

    def metrics_text(self) -> str:
        raise NotImplementedError
