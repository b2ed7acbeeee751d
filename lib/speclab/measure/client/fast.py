"""The measured hot path: a lean HTTP/1.1 client on an asyncio ``Protocol`` (keep-alive pool,
chunked and content-length bodies, one ``perf_counter`` stamp per socket read).

Why not httpx here: docs/client-performance.md measures httpx falling behind beyond ~45 k
chunks/s on one core, and a stream that is read late is timed late."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from speclab.measure.client.sse import SSEDecoder, StreamAccumulator
from speclab.urls import Endpoint

_perf = time.perf_counter
_MAX_HEAD_BYTES = 64 * 1024


class _Stale(Exception):
    """A reused keep-alive connection died before any byte of the answer arrived."""


class _Exchange:
    """Parses one HTTP/1.1 response on a connection, routing its body to a sink."""

    # states
    HEAD, CH_SIZE, CH_DATA, CH_CRLF, CH_TRAILER, LENGTH, UNTIL_EOF, DONE = range(8)

    __slots__ = (
        "_body",
        "_buf",
        "_got_bytes",
        "_left",
        "_on_head",
        "_sink",
        "future",
        "headers",
        "keep_alive",
        "state",
        "status",
    )

    def __init__(
        self,
        future: asyncio.Future[None],
        on_head: Callable[[int, dict[str, str]], Callable[[bytes, float], None] | None],
    ) -> None:
        self.state = self.HEAD
        self.future = future
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep_alive = True
        self._on_head = on_head
        self._sink: Callable[[bytes, float], None] | None = None
        self._body: list[bytes] = []  # collected when on_head gave no sink
        self._buf = b""
        self._left = 0
        self._got_bytes = False

    @property
    def body(self) -> bytes:
        return b"".join(self._body)

    def feed(self, data: bytes, t: float) -> None:
        self._got_bytes = True
        state = self.state
        if state == self.HEAD:
            data = self._feed_head(data)
            state = self.state
            if not data or state == self.DONE:
                return
        if state == self.LENGTH:
            if len(data) >= self._left:
                piece, extra = data[: self._left], data[self._left :]
                self._left = 0
                self._deliver(piece, t)
                if extra:
                    self.keep_alive = False  # bytes after the body: do not reuse
                self._complete(t)
            else:
                self._left -= len(data)
                self._deliver(data, t)
        elif state == self.UNTIL_EOF:
            self._deliver(data, t)
        elif state == self.DONE:
            self.keep_alive = False  # bytes after the answer: do not reuse
        else:
            self._feed_chunked(data, t)

    def _feed_head(self, data: bytes) -> bytes:
        buf = self._buf + data if self._buf else data
        idx = buf.find(b"\r\n\r\n")
        if idx < 0:
            if len(buf) > _MAX_HEAD_BYTES:
                self._fail(ConnectionError("the server sent response headers over 64 KiB"))
            self._buf = buf
            return b""
        self._buf = b""
        head, rest = buf[:idx], buf[idx + 4 :]
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        try:
            status = int(parts[1])
        except (IndexError, ValueError):
            self._fail(ConnectionError(f"the server sent a bad status line: {lines[0][:100]!r}"))
            return b""
        if 100 <= status < 200:  # interim answer: the real one follows
            return self._feed_head(rest) if rest else b""
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self.status = status
        self.headers = headers
        version = parts[0].upper()
        connection = headers.get("connection", "").lower()
        self.keep_alive = (version == "HTTP/1.1" and "close" not in connection) or (
            "keep-alive" in connection
        )
        self._sink = self._on_head(status, headers)
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self.state = self.CH_SIZE
        elif "content-length" in headers:
            try:
                self._left = int(headers["content-length"])
            except ValueError:
                self._fail(ConnectionError("the server sent a bad Content-Length"))
                return b""
            self.state = self.LENGTH
            if self._left == 0:
                self._complete(0.0)
                return b""
        elif status in (204, 304):
            self._complete(0.0)
            return b""
        else:
            self.state = self.UNTIL_EOF
            self.keep_alive = False
        return rest

    def _feed_chunked(self, data: bytes, t: float) -> None:
        buf = self._buf + data if self._buf else data
        n = len(buf)
        pos = 0
        pieces: list[bytes] = []
        state = self.state
        while pos < n:
            if state == self.CH_DATA:
                take = min(self._left, n - pos)
                pieces.append(buf[pos : pos + take])
                pos += take
                self._left -= take
                if self._left == 0:
                    state = self.CH_CRLF
            elif state == self.CH_SIZE:
                nl = buf.find(b"\r\n", pos)
                if nl < 0:
                    break
                try:
                    size = int(buf[pos:nl].split(b";", 1)[0], 16)
                except ValueError:
                    self.state = state
                    self._fail(ConnectionError("the server sent a bad chunk size"))
                    return
                pos = nl + 2
                if size:
                    self._left = size
                    state = self.CH_DATA
                else:
                    state = self.CH_TRAILER
            elif state == self.CH_CRLF:
                if n - pos < 2:
                    break
                pos += 2
                state = self.CH_SIZE
            else:  # CH_TRAILER: lines until an empty one
                nl = buf.find(b"\r\n", pos)
                if nl < 0:
                    break
                empty = nl == pos
                pos = nl + 2
                if empty:
                    self.state = state
                    if pieces:
                        self._deliver(b"".join(pieces), t)
                    if pos < n:
                        self.keep_alive = False
                    self._buf = b""
                    self._complete(t)
                    return
        self.state = state
        self._buf = buf[pos:] if pos < n else b""
        if pieces:
            # One arrival, one timestamp: joining the pieces changes no time.
            self._deliver(pieces[0] if len(pieces) == 1 else b"".join(pieces), t)

    def _deliver(self, data: bytes, t: float) -> None:
        if self._sink is not None:
            self._sink(data, t)
        else:
            self._body.append(data)

    def _complete(self, t: float) -> None:
        self.state = self.DONE
        if not self.future.done():
            self.future.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        self.keep_alive = False
        self.state = self.DONE
        if not self.future.done():
            self.future.set_exception(exc)

    def connection_ended(self, exc: BaseException | None) -> None:
        if self.state == self.DONE:
            return
        self.keep_alive = False
        if self.state == self.UNTIL_EOF:
            self._complete(_perf())
        elif not self._got_bytes:
            self._fail(_Stale(str(exc) if exc else "connection closed"))
        else:
            reason = f": {exc}" if exc else ""
            self._fail(ConnectionError(f"the server closed the connection mid-response{reason}"))


class _H1Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; the arrival time is taken per socket read."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.exchange: _Exchange | None = None
        self.last_activity = _perf()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        t = _perf()
        self.last_activity = t
        exchange = self.exchange
        if exchange is None:  # bytes nobody asked for: do not reuse this connection
            self.close()
            return
        exchange.feed(data, t)

    def eof_received(self) -> bool:
        if self.exchange is not None:
            self.exchange.connection_ended(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.exchange is not None:
            self.exchange.connection_ended(exc)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            with contextlib.suppress(RuntimeError):  # its event loop may be gone already
                self.transport.close()


class FastTransport:
    """Keep-alive pool of ``_H1Connection`` to one server (the endpoint's host:port)."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        max_connections: int,
        connect_timeout_s: float,
        read_timeout_s: float,
    ) -> None:
        parts = urlsplit(endpoint.root)
        self._host = endpoint.host
        self._port = endpoint.port
        self._host_header = parts.netloc.rpartition("@")[2]
        self._ssl: ssl.SSLContext | None = (
            ssl.create_default_context() if parts.scheme == "https" else None
        )
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._max_connections = max_connections
        self._sem: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: list[_H1Connection] = []
        self._all: set[_H1Connection] = set()

    async def _connect(self) -> _H1Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    _H1Connection,
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=self._host if self._ssl else None,
                ),
                self._connect_timeout_s,
            )
        except asyncio.TimeoutError:
            raise ConnectionError(
                f"could not connect to {self._host_header} within {self._connect_timeout_s:g} s"
            ) from None
        sock = conn.transport.get_extra_info("socket") if conn.transport else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._all.add(conn)
        return conn

    def _request_bytes(self, path: str, headers: dict[str, str], body: bytes) -> bytes:
        lines = [
            f"POST {path} HTTP/1.1",
            f"Host: {self._host_header}",
            f"Content-Length: {len(body)}",
            "Connection: keep-alive",
        ]
        lines.extend(f"{k}: {v}" for k, v in headers.items())
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    async def exchange(
        self,
        url: str,
        headers: dict[str, str],
        body: bytes,
        on_head: Callable[[int, dict[str, str]], Callable[[bytes, float], None] | None],
    ) -> _Exchange:
        """POST and wait until the whole answer was read; raises on network trouble."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # first use, or reused under a new asyncio.run()
            for stale in self._all:
                stale.close()
            self._all.clear()
            self._idle.clear()
            self._loop = loop
            self._sem = asyncio.Semaphore(self._max_connections)
        assert self._sem is not None
        parts = urlsplit(url)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        payload = self._request_bytes(path or "/", headers, body)
        async with self._sem:
            for attempt in (0, 1):
                conn = None
                while self._idle:
                    candidate = self._idle.pop()
                    if not candidate.closed:
                        conn = candidate
                        break
                reused = conn is not None
                if conn is None:
                    conn = await self._connect()
                try:
                    ex = await self._run(conn, payload, on_head)
                except _Stale:
                    conn.close()
                    self._all.discard(conn)
                    if reused and attempt == 0:
                        continue  # the server dropped an idle keep-alive connection
                    raise ConnectionError(
                        "the server closed the connection before answering"
                    ) from None
                except BaseException:
                    if conn.exchange is not None:
                        # Given up (timeout, cancel): the close below must not set an
                        # exception on a future nobody awaits any more.
                        conn.exchange.future.cancel()
                    conn.close()
                    self._all.discard(conn)
                    raise
                if ex.keep_alive and not conn.closed:
                    conn.exchange = None
                    self._idle.append(conn)
                else:
                    conn.close()
                    self._all.discard(conn)
                return ex
        raise AssertionError("unreachable")  # pragma: no cover

    async def _run(
        self,
        conn: _H1Connection,
        payload: bytes,
        on_head: Callable[[int, dict[str, str]], Callable[[bytes, float], None] | None],
    ) -> _Exchange:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        ex = _Exchange(future, on_head)
        conn.exchange = ex
        conn.last_activity = _perf()
        if conn.transport is None or conn.transport.is_closing():
            raise _Stale("connection closed")
        conn.transport.write(payload)
        timeout = self._read_timeout_s
        while True:
            done, _ = await asyncio.wait((future,), timeout=timeout)
            if done:
                future.result()
                return ex
            idle = _perf() - conn.last_activity
            if idle >= self._read_timeout_s:
                raise TimeoutError(f"no data from the server for {self._read_timeout_s:g} s")
            timeout = self._read_timeout_s - idle

    async def stream(
        self, url: str, headers: dict[str, str], body: bytes, acc: StreamAccumulator
    ) -> None:
        decoder = SSEDecoder(acc.feed)

        def on_head(status: int, hdrs: dict[str, str]) -> Callable[[bytes, float], None] | None:
            acc.http_status = status
            if status == 200 and "application/json" not in hdrs.get("content-type", ""):
                return decoder.feed
            return None  # collect: an error body or a non-streamed JSON answer

        ex = await self.exchange(url, headers, body, on_head)
        t = _perf()
        if ex.status != 200:
            acc.fail_http(ex.status, ex.body)
        elif "application/json" in ex.headers.get("content-type", ""):
            acc.feed(t, ex.body)
        else:
            decoder.close(t)

    async def post_json(self, url: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        ex = await self.exchange(url, headers, body, lambda status, hdrs: None)
        return ex.status, ex.body

    async def aclose(self) -> None:
        for conn in list(self._all):
            conn.close()
        self._all.clear()
        self._idle.clear()

