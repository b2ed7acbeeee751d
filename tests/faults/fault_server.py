"""A controllable OpenAI-compatible fake server that misbehaves on purpose.

Fault injection only: every measured figure in speclab comes from the real embedded vLLM.
One ``FaultServer`` serves ``/health``, ``/v1/models``, ``/version``, ``/metrics`` and
streaming ``/v1/chat/completions`` like vLLM does (continuous usage, a usage chunk, then
``data: [DONE]``), except where its ``fault`` says otherwise:

``none``        every request streams ``chunks`` chunks properly;
``kill``        after ``after`` chat requests the listener and every connection close
                (as when the server process is killed): later requests are refused;
``stall``       headers and one chunk, then silence until the test ends;
``ping``        headers, then only SSE comments (``: ping``) every 50 ms, forever;
``status``      every chat request answers ``status`` (429, 500, 503, ...) with an error body;
``malformed``   one good chunk, then a ``data:`` line that is not JSON;
``reset``       three chunks, then a TCP reset (SO_LINGER 0);
``truncated``   three of ``chunks`` chunks, then the body ends cleanly (HTTP-wise) with no
                ``finish_reason``, no usage chunk and no ``[DONE]``; 50 ms later the server
                closes the connection it never announced closing;
``auth``        every path answers 401 unless ``Authorization: Bearer <api_key>``.

``require_key=True`` adds the ``auth`` check to any fault; ``echo_auth=True`` makes the
``status`` fault's error body quote the request's Authorization header, as a careless proxy
does (the secret tests plant a key and look for it everywhere speclab writes or prints).
Run as a script (``python fault_server.py FAULT [--api-key KEY] [--echo-auth] [anything]``) it
serves until its stdin closes, printing its port first: a server process on this machine
whose command line speclab's probe reads.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAULTS = ("none", "kill", "stall", "ping", "status", "malformed", "reset", "truncated", "auth")


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hung up on a stalled stream is the point, not a failure


class FaultServer:
    """``with FaultServer("truncated") as server: ... server.url ...``; binds 127.0.0.1 on a free port."""

    def __init__(self, fault: str = "none", *, chunks: int = 8, after: int = 0, status: int = 503,
                 api_key: str = "sk-test", delay_s: float = 0.001, require_key: bool = False,
                 echo_auth: bool = False) -> None:
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; one of {FAULTS}")
        self.fault = fault
        self.chunks = chunks
        self.after = after
        self.status = status
        self.api_key = api_key
        self.delay_s = delay_s
        self.require_key = require_key or fault == "auth"
        self.echo_auth = echo_auth
        self.chat_requests = 0
        self.completed = 0
        self.generation_tokens = 0
        self.seen_auth: list[str | None] = []  # the Authorization header of every request
        self.lock = threading.Lock()
        self.released = threading.Event()  # ends stalls and pings when the test is over
        self.killed = threading.Event()
        self._sockets: set[socket.socket] = set()
        self.server = _QuietServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        if not self.killed.is_set():
            self.server.shutdown()
        self.server.server_close()
        self._close_all()

    def kill(self) -> None:
        """Stop listening and drop every open connection, like a killed server process."""
        if self.killed.is_set():
            return
        self.killed.set()
        threading.Thread(target=self.server.shutdown, daemon=True).start()
        self.server.server_close()
        self._close_all()

    def _close_all(self) -> None:
        with self.lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def metrics_text(self) -> str:
        with self.lock:
            requests, tokens = self.completed, self.generation_tokens
        labels = 'engine="0",model_name="fake"'
        return (
            "# TYPE vllm:request_success_total counter\n"
            f'vllm:request_success_total{{{labels},finished_reason="length"}} {float(requests)}\n'
            "# TYPE vllm:generation_tokens_total counter\n"
            f"vllm:generation_tokens_total{{{labels}}} {float(tokens)}\n"
        )

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with fake.lock:
                    fake._sockets.add(self.connection)

            def finish(self) -> None:
                with fake.lock:
                    fake._sockets.discard(self.connection)
                try:
                    super().finish()
                except OSError:
                    pass

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _authorised(self) -> bool:
                header = self.headers.get("Authorization")
                with fake.lock:
                    fake.seen_auth.append(header)
                if not fake.require_key or header == f"Bearer {fake.api_key}":
                    return True
                self._send(401, json.dumps({"error": {"message": "Unauthorized", "code": 401}}).encode())
                return False

            def do_GET(self) -> None:  # noqa: N802
                if not self._authorised():
                    return
                if self.path == "/health":
                    self._send(200, b"")
                elif self.path == "/metrics":
                    self._send(200, fake.metrics_text().encode(), "text/plain; version=0.0.4")
                elif self.path == "/v1/models":
                    self._send(200, json.dumps({"data": [{"id": "fake", "max_model_len": 4096}]}).encode())
                elif self.path == "/version":
                    self._send(200, b'{"version": "0.0-fault"}')
                else:
                    self._send(404, b'{"error": "not found"}')

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self._authorised():
                    return
                if self.path == "/reset_prefix_cache":
                    self._send(200, b"")
                    return
                if self.path != "/v1/chat/completions":
                    self._send(404, b'{"error": "not found"}')
                    return
                with fake.lock:
                    fake.chat_requests += 1
                    number = fake.chat_requests
                if fake.fault == "kill" and number > fake.after:
                    fake.kill()
                    return
                if fake.fault == "status":
                    text = f"injected {fake.status}"
                    if fake.echo_auth:
                        text += f" for a request with Authorization: {self.headers.get('Authorization')}"
                    message = {"error": {"message": text, "code": fake.status}}
                    self._send(fake.status, json.dumps(message).encode())
                    return
                self._stream(body)

            def _chunk(self, payload: bytes) -> None:
                self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
                self.wfile.flush()

            def _event(self, obj: dict[str, Any] | str) -> None:
                data = obj if isinstance(obj, str) else json.dumps(obj)
                self._chunk(f"data: {data}\n\n".encode())

            def _token_event(self, sent: int, last: bool) -> None:
                self._event({"choices": [{"index": 0, "delta": {"content": "tok "},
                                          "finish_reason": "length" if last else None}],
                             "usage": {"prompt_tokens": 5, "completion_tokens": sent,
                                       "total_tokens": 5 + sent}})

            def _stream(self, body: dict[str, Any]) -> None:
                total = min(int(body.get("max_tokens") or fake.chunks), fake.chunks)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                fault = fake.fault
                if fault == "ping":
                    while not fake.released.wait(0.05):
                        self._chunk(b": ping\n\n")
                    return
                stop_after = {"stall": 1, "malformed": 1, "reset": 3, "truncated": 3}.get(fault, total)
                for sent in range(1, min(total, stop_after) + 1):
                    time.sleep(fake.delay_s)
                    self._token_event(sent, sent == total)
                if fault == "stall":
                    fake.released.wait()
                    return
                if fault == "malformed":
                    self._chunk(b'data: {"choices": [{"delta": {"content": "x"\n\n')
                    self.wfile.write(b"0\r\n\r\n")
                    return
                if fault == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    self.close_connection = True
                    return
                if fault == "truncated":
                    self.wfile.write(b"0\r\n\r\n")  # a clean HTTP end, an incomplete stream
                    # Close a moment later, without "Connection: close": a keep-alive client
                    # has by then sent its next request on this connection, the race CI hit
                    # by chance, now every time.
                    self.wfile.flush()
                    time.sleep(0.05)
                    self.close_connection = True
                    return
                self._event({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": total,
                                                      "total_tokens": 5 + total}})
                self._event("[DONE]")
                self.wfile.write(b"0\r\n\r\n")
                with fake.lock:
                    fake.completed += 1
                    fake.generation_tokens += total

        return Handler


if __name__ == "__main__":
    import argparse
    import sys

    parser = argparse.ArgumentParser()
    parser.add_argument("fault", choices=FAULTS)
    parser.add_argument("--api-key", default="sk-test")
    parser.add_argument("--status", type=int, default=503)
    parser.add_argument("--echo-auth", action="store_true")
    parser.add_argument("--require-key", action="store_true")
    known, _ = parser.parse_known_args()  # the rest stands for flags speclab does not know
    with FaultServer(known.fault, api_key=known.api_key, status=known.status, echo_auth=known.echo_auth,
                     require_key=known.require_key) as served:
        print(served.port, flush=True)
        sys.stdin.read()
