"""The streaming client every latency and token number in speclab comes from.

One parsing core, two transports behind one interface:

- ``SSEDecoder`` turns response-body bytes into SSE ``data`` payloads and
  ``StreamAccumulator`` turns timestamped payloads into one ``RequestRecord``; neither
  does any I/O, so both transports (and the unit tests) feed the same code.
- ``transport="fast"`` is a lean HTTP/1.1 client on an asyncio ``Protocol`` (keep-alive
  pool, chunked and content-length bodies, one ``perf_counter`` stamp per socket read).
  It is the measured hot path: client-performance.md shows httpx falling behind beyond
  ~45 k chunks/s, and a stream that is read late is timed late.
- ``transport="httpx"`` uses ``httpx.AsyncClient`` (injectable transport, so unit tests
  run on ``httpx.MockTransport``); fine for notebooks and light loads.

Token accounting follows domain.md section 4: reasoning arrives in ``delta.reasoning``
(vLLM) or ``delta.reasoning_content`` (SGLang, older vLLM) and both are read; output
tokens come from the server's usage, never from counting words.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import orjson

from speclab.errors import SpeclabError
from speclab.urls import Endpoint

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "LoopLagMonitor",
    "RequestRecord",
    "RequestSpec",
    "SSEDecoder",
    "Sampling",
    "StreamAccumulator",
    "StreamClient",
    "measure_loop_lag",
    "use_uvloop",
]

TransportName = Literal["fast", "httpx"]
OUTPUT_TOKEN_SOURCES = ("usage", "continuous_usage", "token_ids", "tokenize", "none")

_perf = time.perf_counter
_MAX_ERROR_TEXT = 2000
_MAX_HEAD_BYTES = 64 * 1024
# What servers say when they reject a field they do not know (pydantic "extra_forbidden",
# OpenAI "Unrecognized request argument", others "unknown field"), or the field names.
_UNKNOWN_FIELD_HINTS = (
    "extra_forbidden",
    "extra inputs",
    "extra fields",
    "extra field",
    "unrecognized request argument",
    "unrecognized field",
    "unknown field",
    "unknown parameter",
    "unknown argument",
    "unexpected keyword",
    "unexpected field",
    "additional properties",
    "not permitted",
    "return_token_ids",
    "continuous_usage_stats",
    "chat_template_kwargs",
    "ignore_eos",
)


# --------------------------------------------------------------------------- data shapes


@dataclass
class Sampling:
    """Sampling settings sent with every request (temperature 0 for lossless A/B runs)."""

    temperature: float = 0.0
    top_p: float | None = None
    seed: int | None = None
    max_tokens: int = 256
    ignore_eos: bool = False
    chat_template_kwargs: dict[str, Any] | None = None  # e.g. {"enable_thinking": True}
    extra_body: dict[str, Any] | None = None  # merged last into the request body


@dataclass
class RequestSpec:
    """One request to send: chat ``messages`` or a plain completions ``prompt``."""

    request_id: str
    prompt_id: str
    category: str = ""
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None  # when set, the request goes to /v1/completions
    max_tokens: int | None = None  # overrides Sampling.max_tokens
    tags: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise SpeclabError(
                f"Request {self.request_id!r} needs exactly one of messages (chat) or prompt "
                "(completions)."
            )


@dataclass
class RequestRecord:
    """One row per request; times in seconds, offsets relative to the request's send.

    ``send_time_s`` is on the caller's run clock (``perf_counter() - t0``); ``ttft_s`` is
    the first chunk carrying any token (reasoning or answer), ``ttfa_s`` the first chunk
    carrying answer ``content``, ``e2e_s`` the last chunk carrying tokens (the trailing
    usage-only chunk and ``[DONE]`` are excluded). ``tpot_s`` is
    ``(e2e_s - ttft_s) / (output_tokens - 1)``: per-chunk gaps mislead under speculative
    decoding, where one chunk carries several tokens.
    """

    request_id: str
    prompt_id: str
    category: str
    send_time_s: float
    ttft_s: float | None = None
    ttfa_s: float | None = None
    e2e_s: float | None = None
    tpot_s: float | None = None
    output_tokens: int | None = None
    output_tokens_source: str = "none"
    reasoning_tokens: int | None = None
    answer_tokens: int | None = None
    prompt_tokens: int | None = None
    chunks: int = 0
    tokens_per_chunk_mean: float | None = None
    chunk_offsets_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] | None = None
    finish_reason: str | None = None
    http_status: int | None = None
    error: str | None = None
    text: str = ""
    reasoning_text: str = ""
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None  # the prompt as the server tokenised it (chat template applied)
    tags: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the server answered 200 and the stream completed without error."""
        return self.error is None and self.http_status == 200

    def to_row(self) -> dict[str, Any]:
        """A plain dict (JSON- and pandas-ready) including ``ok``."""
        row = {f.name: getattr(self, f.name) for f in fields(self)}
        row["ok"] = self.ok
        return row

    def set_output_tokens(self, count: int | None, source: str) -> None:
        """Set the output token count and recompute what derives from it."""
        self.output_tokens = count
        self.output_tokens_source = source if count is not None else "none"
        self.tpot_s = None
        self.tokens_per_chunk_mean = None
        if count is None:
            return
        if self.chunks:
            self.tokens_per_chunk_mean = count / self.chunks
        if count >= 2 and self.ttft_s is not None and self.e2e_s is not None:
            self.tpot_s = (self.e2e_s - self.ttft_s) / (count - 1)
        if self.reasoning_tokens is not None and self.answer_tokens is None:
            self.answer_tokens = max(count - self.reasoning_tokens, 0)


# --------------------------------------------------------------------------- parsing core


def _error_text(obj: Any) -> str:
    """The human part of an OpenAI-style error object (``{"error": {...}}`` or flat)."""
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            for key in ("message", "detail", "msg"):
                if err.get(key):
                    return str(err[key])[:_MAX_ERROR_TEXT]
        elif err:
            return str(err)[:_MAX_ERROR_TEXT]
        if obj.get("detail"):
            return str(obj["detail"])[:_MAX_ERROR_TEXT]
    return orjson.dumps(obj).decode("utf-8", "replace")[:_MAX_ERROR_TEXT]


def _body_error_text(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    try:
        return _error_text(orjson.loads(body))
    except orjson.JSONDecodeError:
        return text[:_MAX_ERROR_TEXT] or "(empty body)"


class StreamAccumulator:
    """Builds one ``RequestRecord`` from timestamped SSE payloads; does no I/O.

    Feed ``feed(arrival_perf_counter, payload)`` for every SSE ``data`` payload (bytes or
    str, ``[DONE]`` included), set ``http_status``/``fail()`` as the transport learns
    them, then call ``finish()``. A chunk "carries tokens" when the running
    ``usage.completion_tokens`` grew (continuous usage stats), else when it has
    ``token_ids``, else when it has non-empty content, reasoning or tool-call text.
    """

    __slots__ = (
        "_a_tokens",
        "_cont_usage",
        "_content",
        "_counts",
        "_exact",
        "_final_usage",
        "_finish",
        "_last_ct",
        "_offsets",
        "_pending",
        "_phase",
        "_r_tokens",
        "_reasoning",
        "_token_ids",
        "_prompt_ids",
        "_ttfa",
        "done",
        "error",
        "error_body",
        "http_status",
        "send_perf",
        "send_time_s",
        "spec",
    )

    def __init__(self, spec: RequestSpec, send_perf: float, t0: float) -> None:
        self.spec = spec
        self.send_perf = send_perf
        self.send_time_s = send_perf - t0
        self.http_status: int | None = None
        self.error: str | None = None
        self.error_body: str | None = None  # raw body text of a non-200 answer
        self.done = False  # saw data: [DONE]
        self._offsets: list[float] = []
        self._counts: list[int] = []
        self._exact = True  # every token chunk had an exact count
        self._last_ct = 0
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._token_ids: list[int] | None = None
        self._prompt_ids: list[int] | None = None
        self._ttfa: float | None = None
        self._finish: str | None = None
        self._final_usage: dict[str, Any] | None = None
        self._cont_usage: dict[str, Any] | None = None
        self._r_tokens = 0
        self._a_tokens = 0
        self._pending = 0  # tokens of text-less chunks, given to the next chunk's phase
        self._phase = ""  # "reasoning" or "answer": the phase of the last text chunk

    def fail(self, message: str) -> None:
        """Record an error (the first one wins: it is usually the cause)."""
        if self.error is None:
            self.error = message

    def fail_http(self, status: int, body: bytes) -> None:
        """Record a non-200 answer with the server's own error text."""
        self.http_status = status
        self.error_body = body.decode("utf-8", "replace")[:_MAX_ERROR_TEXT]
        self.fail(f"HTTP {status}: {_body_error_text(body)}")

    def feed(self, t: float, data: bytes | str) -> None:
        """One SSE ``data`` payload that arrived at ``perf_counter()`` time ``t``."""
        if data == b"[DONE]" or data == "[DONE]":
            self.done = True
            return
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            lines = data.splitlines() if isinstance(data, (bytes, str)) else []
            if len(lines) > 1:  # a server that forgot the blank line between events
                for line in lines:
                    self.feed(t, line)
                return
            if not data.strip():
                return
            shown = data[:200] if isinstance(data, str) else data[:200].decode("utf-8", "replace")
            self.fail(f"the server sent an event that is not JSON: {shown!r}")
            return
        if type(obj) is not dict:
            return
        if "error" in obj or obj.get("object") == "error":
            self.fail(f"error in stream: {_error_text(obj)}")
            return
        choices = obj.get("choices")
        usage = obj.get("usage")
        prompt_ids = obj.get("prompt_token_ids")
        if prompt_ids and self._prompt_ids is None:
            self._prompt_ids = prompt_ids
        if choices:
            self._on_choice(t, choices[0], usage)
        elif usage:
            self._final_usage = usage

    def _on_choice(self, t: float, choice: dict[str, Any], usage: dict[str, Any] | None) -> None:
        delta = choice.get("delta")
        if delta is None:
            delta = choice.get("message")  # a server that ignored stream: true
        if delta is not None:
            content = delta.get("content")
            reasoning = delta.get("reasoning") or delta.get("reasoning_content")
            tools = delta.get("tool_calls")
        else:  # /v1/completions
            content = choice.get("text")
            reasoning = None
            tools = None
        finish = choice.get("finish_reason")
        if finish:
            self._finish = finish
        n: int | None = None
        if usage is not None:
            ct = usage.get("completion_tokens")
            if type(ct) is int:
                n = ct - self._last_ct
                self._last_ct = ct
                self._cont_usage = usage
        ids = choice.get("token_ids")
        if ids:
            if self._token_ids is None:
                self._token_ids = []
            self._token_ids.extend(ids)
            if n is None:
                n = len(ids)
        if content:
            self._content.append(content)
        if reasoning:
            self._reasoning.append(reasoning)
        if n is None:
            if not (content or reasoning or tools):
                return
            self._exact = False
            n = 0
        elif n <= 0:
            return
        offset = t - self.send_perf
        self._offsets.append(offset)
        self._counts.append(n)
        if content:
            if self._ttfa is None:
                self._ttfa = offset
            self._phase = "answer"
        elif reasoning:
            self._phase = "reasoning"
        elif not tools:
            # A text-less token chunk (e.g. a think marker): it belongs to whatever
            # phase the next text chunk is in.
            self._pending += n
            return
        else:
            self._phase = "answer"
        if self._phase == "reasoning":
            self._r_tokens += n + self._pending
        else:
            self._a_tokens += n + self._pending
        self._pending = 0

    def finish(self) -> RequestRecord:
        """The record; call once, after the body ended (or failed)."""
        spec = self.spec
        offsets = self._offsets
        chunks = len(offsets)
        rec = RequestRecord(
            request_id=spec.request_id,
            prompt_id=spec.prompt_id,
            category=spec.category,
            send_time_s=self.send_time_s,
            http_status=self.http_status,
            chunks=chunks,
            chunk_offsets_s=offsets,
            finish_reason=self._finish,
            text="".join(self._content),
            reasoning_text="".join(self._reasoning),
            token_ids=self._token_ids,
            prompt_token_ids=self._prompt_ids,
            tags=dict(spec.tags),
        )
        if chunks:
            rec.ttft_s = offsets[0]
            rec.e2e_s = offsets[-1]
            rec.ttfa_s = self._ttfa
        if self._exact and chunks:
            rec.chunk_tokens = self._counts
        usage = self._final_usage or self._cont_usage or {}
        if isinstance(usage.get("prompt_tokens"), int):
            rec.prompt_tokens = usage["prompt_tokens"]
        details = usage.get("completion_tokens_details") or {}
        if isinstance(details, dict) and isinstance(details.get("reasoning_tokens"), int):
            rec.reasoning_tokens = details["reasoning_tokens"]
        elif self._exact and chunks:
            if self._phase == "reasoning":
                self._r_tokens += self._pending
            else:
                self._a_tokens += self._pending
            self._pending = 0
            rec.reasoning_tokens = self._r_tokens
            rec.answer_tokens = self._a_tokens
        if self._final_usage and type(self._final_usage.get("completion_tokens")) is int:
            rec.set_output_tokens(self._final_usage["completion_tokens"], "usage")
        elif self._cont_usage is not None:
            rec.set_output_tokens(self._last_ct, "continuous_usage")
        elif self._token_ids is not None and self._exact and chunks:
            rec.set_output_tokens(len(self._token_ids), "token_ids")
        if self.error is None and self.http_status == 200 and not chunks:
            self.error = "the stream ended without carrying any token"
        rec.error = self.error
        return rec


class SSEDecoder:
    """Splits an SSE byte stream into ``data`` payloads, passed to ``sink(t, payload)``.

    Handles ``\\n`` and ``\\r\\n`` line ends, comment/ping lines (``: ping``), ``event:``,
    ``id:`` and ``retry:`` lines, blank keep-alives and events split across reads.
    Multi-line ``data`` fields are joined with ``\\n`` as the SSE spec says.
    """

    __slots__ = ("_data", "_rest", "_sink")

    def __init__(self, sink: Callable[[float, bytes], None]) -> None:
        self._sink = sink
        self._rest = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes, t: float) -> None:
        """Bytes that arrived at ``perf_counter()`` time ``t``."""
        buf = self._rest + chunk if self._rest else chunk
        find = buf.find
        data = self._data
        start = 0
        while True:
            nl = find(b"\n", start)
            if nl < 0:
                break
            end = nl - 1 if nl > start and buf[nl - 1] == 13 else nl  # 13 = "\r"
            if end == start:  # blank line: the event is complete
                if data:
                    payload = data[0] if len(data) == 1 else b"\n".join(data)
                    data.clear()
                    self._sink(t, payload)
            elif buf.startswith(b"data:", start):
                value_start = start + 6 if buf[start + 5 : start + 6] == b" " else start + 5
                data.append(buf[value_start:end])
            # ":" comments and event:/id:/retry: fields carry nothing we time
            start = nl + 1
        self._rest = buf[start:] if start < len(buf) else b""

    def close(self, t: float) -> None:
        """End of body: deliver an event that lacked its closing blank line."""
        if self._rest:
            self.feed(b"\n", t)
        if self._data:
            self.feed(b"\n", t)


# --------------------------------------------------------------------------- fast transport


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


class _FastTransport:
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
            for conn in self._all:
                conn.close()
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


# --------------------------------------------------------------------------- httpx transport


class _HttpxTransport:
    """The same interface on ``httpx.AsyncClient``; bytes go through ``SSEDecoder``."""

    def __init__(
        self,
        *,
        max_connections: int,
        connect_timeout_s: float,
        read_timeout_s: float,
        transport: Any = None,
    ) -> None:
        import httpx

        self._httpx = httpx
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(
                connect=connect_timeout_s,
                read=read_timeout_s,
                write=connect_timeout_s,
                pool=read_timeout_s,
            ),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            transport=transport,
            trust_env=False,
        )

    async def stream(
        self, url: str, headers: dict[str, str], body: bytes, acc: StreamAccumulator
    ) -> None:
        async with self.client.stream("POST", url, content=body, headers=headers) as resp:
            acc.http_status = resp.status_code
            if resp.status_code != 200:
                acc.fail_http(resp.status_code, await resp.aread())
                return
            if "application/json" in resp.headers.get("content-type", ""):
                whole = await resp.aread()
                acc.feed(_perf(), whole)
                return
            decoder = SSEDecoder(acc.feed)
            async for piece in resp.aiter_bytes():
                decoder.feed(piece, _perf())
            decoder.close(_perf())

    async def post_json(self, url: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        resp = await self.client.post(url, content=body, headers=headers)
        return resp.status_code, resp.content

    async def aclose(self) -> None:
        await self.client.aclose()


# --------------------------------------------------------------------------- the client


def _describe(exc: BaseException) -> str:
    name = type(exc).__name__
    text = str(exc)
    return f"{name}: {text}" if text else name


class StreamClient:
    """Sends streaming chat/completions requests and returns one ``RequestRecord`` each.

    ``send()`` never raises for server or network trouble: the record carries
    ``http_status`` and ``error``. Create one client per run and reuse it (it holds the
    connection pool); use it as an async context manager. Keep ``max_connections``
    above the run's concurrency so no request waits for a connection.
    """

    def __init__(
        self,
        endpoint: Endpoint | str,
        model: str,
        *,
        transport: TransportName = "fast",
        sampling: Sampling | None = None,
        max_connections: int = 256,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 600.0,
        api_key_env: str | None = None,
        httpx_transport: Any = None,
    ) -> None:
        self.endpoint = endpoint if isinstance(endpoint, Endpoint) else Endpoint.parse(endpoint)
        self.model = model
        self.sampling = sampling if sampling is not None else Sampling()
        if transport not in ("fast", "httpx"):
            raise SpeclabError(f"Unknown transport {transport!r}; use 'fast' or 'httpx'.")
        if transport == "fast" and httpx_transport is not None:
            raise SpeclabError("httpx_transport only applies to transport='httpx'.")
        self.transport: TransportName = transport
        self._headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",
            "User-Agent": "speclab",
        }
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise SpeclabError(
                    f"The environment variable {api_key_env} (api_key_env) is not set; "
                    "export the API key there."
                )
            self._headers["Authorization"] = f"Bearer {key}"
        self._impl: _FastTransport | _HttpxTransport
        if transport == "fast":
            self._impl = _FastTransport(
                self.endpoint,
                max_connections=max_connections,
                connect_timeout_s=connect_timeout_s,
                read_timeout_s=read_timeout_s,
            )
        else:
            self._impl = _HttpxTransport(
                max_connections=max_connections,
                connect_timeout_s=connect_timeout_s,
                read_timeout_s=read_timeout_s,
                transport=httpx_transport,
            )
        self._chat_url = self.endpoint.api("chat/completions")
        self._completions_url = self.endpoint.api("completions")
        self._tokenize_url = self.endpoint.at_root("tokenize")
        # The vLLM extensions we ask for; switched off for the client's lifetime when the
        # server rejects them.
        self.capabilities: dict[str, Any] = {
            "continuous_usage_stats": True,
            "return_token_ids": True,
            "explicit_defaults": True,
            "downgraded_because": None,
        }

    def __repr__(self) -> str:
        auth = "Authorization" in self._headers
        return (
            f"StreamClient(endpoint={self.endpoint.root!r}, model={self.model!r}, "
            f"transport={self.transport!r}, auth={auth})"
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every connection."""
        await self._impl.aclose()

    def build_body(self, spec: RequestSpec) -> dict[str, Any]:
        """The JSON body ``send()`` posts for ``spec`` (given current capabilities)."""
        s = self.sampling
        caps = self.capabilities
        body: dict[str, Any] = {"model": self.model}
        if spec.prompt is not None:
            body["prompt"] = spec.prompt
        else:
            body["messages"] = spec.messages
        body["max_tokens"] = spec.max_tokens if spec.max_tokens is not None else s.max_tokens
        body["temperature"] = s.temperature
        if s.top_p is not None:
            body["top_p"] = s.top_p
        explicit = caps["explicit_defaults"]
        if s.seed is not None or explicit:
            body["seed"] = s.seed
        if s.ignore_eos or explicit:
            body["ignore_eos"] = s.ignore_eos
        if spec.prompt is None and (s.chat_template_kwargs is not None or explicit):
            body["chat_template_kwargs"] = s.chat_template_kwargs
        body["stream"] = True
        stream_options: dict[str, Any] = {"include_usage": True}
        if caps["continuous_usage_stats"]:
            stream_options["continuous_usage_stats"] = True
        body["stream_options"] = stream_options
        if caps["return_token_ids"]:
            body["return_token_ids"] = True
        if s.extra_body:
            body.update(s.extra_body)
        return body

    def _sends_extras(self) -> bool:
        caps = self.capabilities
        return bool(
            caps["continuous_usage_stats"] or caps["return_token_ids"] or caps["explicit_defaults"]
        )

    @staticmethod
    def _rejects_a_field(acc: StreamAccumulator) -> bool:
        if acc.http_status != 400:
            return False
        text = (acc.error_body or "").lower()
        return any(hint in text for hint in _UNKNOWN_FIELD_HINTS)

    def _downgrade(self, reason: str | None) -> None:
        # Drop only the measurement extras and null/false defaults: dropping a non-default
        # sampling field would change what is measured, so those stay and fail loudly.
        self.capabilities.update(
            continuous_usage_stats=False,
            return_token_ids=False,
            explicit_defaults=False,
            downgraded_because=(reason or "")[:300],
        )

    async def send(self, spec: RequestSpec, t0: float) -> RequestRecord:
        """Send one streaming request; ``t0`` is the run clock's ``perf_counter()`` zero."""
        url = self._completions_url if spec.prompt is not None else self._chat_url
        retried = False
        while True:
            sent_extras = self._sends_extras()
            acc = StreamAccumulator(spec, _perf(), t0)
            try:
                body = orjson.dumps(self.build_body(spec))
                await self._impl.stream(url, self._headers, body, acc)
            except (asyncio.TimeoutError, TimeoutError) as exc:
                acc.fail(f"timeout: {exc}" if str(exc) else "timeout")
            except Exception as exc:  # noqa: BLE001 - every failure becomes a record
                acc.fail(_describe(exc))
            # Requests in flight when another one downgraded also retry once, lean.
            if not retried and sent_extras and self._rejects_a_field(acc):
                retried = True
                if self._sends_extras():
                    self._downgrade(acc.error)
                continue
            break
        record = acc.finish()
        if record.output_tokens is None and record.http_status == 200 and record.chunks:
            count = await self.tokenize(record.reasoning_text + record.text)
            if count is not None:
                record.set_output_tokens(count, "tokenize")
        return record

    async def tokenize(self, text: str) -> int | None:
        """Token count of ``text`` by the server's ``/tokenize`` (None if unavailable)."""
        body = orjson.dumps({"model": self.model, "prompt": text, "add_special_tokens": False})
        headers = dict(self._headers)
        headers["Accept"] = "application/json"
        try:
            status, raw = await self._impl.post_json(self._tokenize_url, headers, body)
            if status != 200:
                return None
            data = orjson.loads(raw)
        except Exception:  # noqa: BLE001 - a missing /tokenize only loses the fallback
            return None
        if isinstance(data, dict):
            if isinstance(data.get("count"), int):
                return int(data["count"])
            if isinstance(data.get("tokens"), list):
                return len(data["tokens"])
        return None


# --------------------------------------------------------------------------- harness health


def use_uvloop() -> bool:
    """Install uvloop's event-loop policy (call before ``asyncio.run``); False if absent."""
    try:
        import uvloop
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


def _quantile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    idx = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[idx]


class LoopLagMonitor:
    """Wakes every ``interval_s`` and records how late it woke: the harness's own lag.

    When the client's event loop is busy parsing streams, every timestamp it takes is
    late by about this much; a run whose p99 lag approaches its inter-token times
    measured the client, not the server. Expect ~0.1-1 ms at idle (timer granularity).
    """

    def __init__(self, interval_s: float = 0.01) -> None:
        self.interval_s = interval_s
        self.samples_s: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start sampling on the running loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> dict[str, float | int | None]:
        """Stop sampling and return ``summary()``."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        return self.summary()

    async def _run(self) -> None:
        interval = self.interval_s
        samples = self.samples_s
        while True:
            due = _perf() + interval
            await asyncio.sleep(interval)
            lag = _perf() - due
            samples.append(max(0.0, lag))

    @property
    def p50_s(self) -> float | None:
        return _quantile(sorted(self.samples_s), 0.5)

    @property
    def p99_s(self) -> float | None:
        return _quantile(sorted(self.samples_s), 0.99)

    @property
    def max_s(self) -> float | None:
        return max(self.samples_s) if self.samples_s else None

    def summary(self) -> dict[str, float | int | None]:
        """``{"samples", "p50_s", "p99_s", "max_s", "mean_s"}``."""
        values = sorted(self.samples_s)
        return {
            "samples": len(values),
            "p50_s": _quantile(values, 0.5),
            "p99_s": _quantile(values, 0.99),
            "max_s": values[-1] if values else None,
            "mean_s": sum(values) / len(values) if values else None,
        }


@contextlib.asynccontextmanager
async def measure_loop_lag(interval_s: float = 0.01) -> AsyncIterator[LoopLagMonitor]:
    """``async with measure_loop_lag() as lag: ...``; read ``lag.summary()`` afterwards."""
    monitor = LoopLagMonitor(interval_s)
    monitor.start()
    try:
        yield monitor
    finally:
        await monitor.stop()
