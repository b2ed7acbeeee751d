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
whose command line speclab's probe reads. The routes, the stream's shape and the thread it is
served from are tests/fakes/base.py's.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the checkout's root holds the tests package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fakes.base import FakeServer, OpenAIHandler  # noqa: E402

FAULTS = ("none", "kill", "stall", "ping", "status", "malformed", "reset", "truncated", "auth")


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hung up on a stalled stream is the point, not a failure


class _Handler(OpenAIHandler):
    fake: FaultServer

    def setup(self) -> None:
        super().setup()
        with self.fake.lock:
            self.fake._sockets.add(self.connection)

    def finish(self) -> None:
        with self.fake.lock:
            self.fake._sockets.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def _authorised(self) -> bool:
        fake = self.fake
        header = self.headers.get("Authorization")
        with fake.lock:
            fake.seen_auth.append(header)
        if not fake.require_key or header == f"Bearer {fake.api_key}":
            return True
        self._send(401, json.dumps({"error": {"message": "Unauthorized", "code": 401}}).encode())
        return False

    def _chat(self, body: dict[str, Any]) -> None:
        fake = self.fake
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

    def _stream(self, body: dict[str, Any]) -> None:
        fake = self.fake
        total = min(int(body.get("max_tokens") or fake.chunks), fake.chunks)
        self._start_stream()
        fault = fake.fault
        if fault == "ping":
            while not fake.released.wait(0.05):
                self._chunk(b": ping\n\n")
            return
        stop_after = {"stall": 1, "malformed": 1, "reset": 3, "truncated": 3}.get(fault, total)
        for sent in range(1, min(total, stop_after) + 1):
            time.sleep(fake.delay_s)
            self._token_event("tok ", sent, sent == total)
        if fault == "stall":
            fake.released.wait()
            return
        if fault == "malformed":
            self._chunk(b'data: {"choices": [{"delta": {"content": "x"\n\n')
            self._end_stream()
            return
        if fault == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if fault == "truncated":
            self._end_stream()  # a clean HTTP end, an incomplete stream
            # Close a moment later, without "Connection: close": a keep-alive client
            # has by then sent its next request on this connection, the race CI hit
            # by chance, now every time.
            self.wfile.flush()
            time.sleep(0.05)
            self.close_connection = True
            return
        self._finish_stream(total)


class FaultServer(FakeServer):
    """``with FaultServer("truncated") as server: ... server.url ...``; binds 127.0.0.1 on a free port."""

    handler = _Handler
    server_class = _QuietServer
    poll_interval_s = 0.05
    version = "0.0-fault"

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
        self.seen_auth: list[str | None] = []  # the Authorization header of every request
        self.released = threading.Event()  # ends stalls and pings when the test is over
        self.killed = threading.Event()
        self._sockets: set[socket.socket] = set()
        super().__init__()

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
        return self.request_counters()


if __name__ == "__main__":
    import argparse

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
