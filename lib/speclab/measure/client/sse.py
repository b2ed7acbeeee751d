"""The parsing core, with no I/O: SSE bytes to payloads (``SSEDecoder``) and timestamped payloads
to one ``RequestRecord`` (``StreamAccumulator``); both transports and the unit tests feed it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from speclab.measure.client.records import RequestSpec
from speclab.runfolder import RequestRecord

_MAX_ERROR_TEXT = 2000


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
        "last_event",
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
        self.last_event = send_perf  # arrival of the last SSE data payload (comments excluded)
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
        self.last_event = t
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
        server_reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
        # vLLM counts reasoning tokens between <think> and </think> in the *generated* ids
        # (reasoning/basic_parsers.py count_reasoning_tokens), so a chat template that opens
        # the thought in the prompt (DeepSeek-R1, Qwen3 style) gets 0 while the stream says
        # otherwise: when every chunk had an exact count and reasoning was streamed, the
        # stream's own split wins.
        trust_stream = self._exact and chunks and (self._reasoning or server_reasoning is None)
        if not trust_stream and isinstance(server_reasoning, int):
            rec.reasoning_tokens = server_reasoning
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
        if self.error is None and self.http_status == 200 and not (self.done or self._finish):
            # A stream cut short (server killed, proxy timeout) must not pass for a complete
            # answer: keep what arrived, but as an error.
            rec.truncated = True
            self.error = (f"truncated stream: the server ended it after {chunks} token chunk(s) "
                          "with neither a finish_reason nor data: [DONE]")
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

