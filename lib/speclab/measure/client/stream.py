"""``StreamClient``: one streaming chat/completions request in, one ``RequestRecord`` out."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import TYPE_CHECKING, Any

import orjson

from speclab.errors import SpeclabError
from speclab.urls import Endpoint

if TYPE_CHECKING:
    from typing_extensions import Self

from speclab.measure.client.fast import FastTransport
from speclab.measure.client.records import RequestSpec, Sampling, TransportName
from speclab.measure.client.sse import StreamAccumulator
from speclab.measure.client.transport import Transport
from speclab.measure.client.via_httpx import HttpxTransport
from speclab.runfolder import RequestRecord

_perf = time.perf_counter
# Default stall limits. A request may wait long in a deep queue before its first token and
# a CPU server may take ~1 s per token under load, so the deadline grows with max_tokens
# (256 tokens: 632 s, close to the old 600 s read timeout); no data event for 5 minutes
# means the server is stuck (SSE comments such as ": ping" do not count as data).
DEADLINE_BASE_S = 120.0
DEADLINE_PER_TOKEN_S = 2.0
IDLE_TIMEOUT_S = 300.0


def default_timeouts(max_tokens: int) -> tuple[float, float]:
    """``(idle_timeout_s, request_deadline_s)`` for a request of ``max_tokens`` tokens."""
    deadline = DEADLINE_BASE_S + DEADLINE_PER_TOKEN_S * max(int(max_tokens), 1)
    return min(IDLE_TIMEOUT_S, deadline), deadline
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
        idle_timeout_s: float | None = None,
        request_deadline_s: float | None = None,
    ) -> None:
        self.idle_timeout_s = idle_timeout_s  # None: default_timeouts(max_tokens)
        self.request_deadline_s = request_deadline_s  # None: default_timeouts(max_tokens)
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
        elif self.endpoint.credentials is not None:
            from speclab.auth import basic_auth_headers

            self._headers.update(basic_auth_headers(self.endpoint))
        self._impl: Transport
        if transport == "fast":
            self._impl = FastTransport(
                self.endpoint,
                max_connections=max_connections,
                connect_timeout_s=connect_timeout_s,
                read_timeout_s=read_timeout_s,
            )
        else:
            self._impl = HttpxTransport(
                max_connections=max_connections,
                connect_timeout_s=connect_timeout_s,
                read_timeout_s=read_timeout_s,
                transport=httpx_transport,
            )
        # Credentials travel in the Authorization header only (httpx would otherwise replace
        # an API key with the URL's user:password).
        plain = self.endpoint.without_credentials()
        self._chat_url = plain.api("chat/completions")
        self._completions_url = plain.api("completions")
        self._tokenize_url = plain.at_root("tokenize")
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
            f"StreamClient(endpoint={self.endpoint.public!r}, model={self.model!r}, "
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
                await self._guarded(self._impl.stream(url, self._headers, body, acc), spec, acc)
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

    def timeouts_for(self, spec: RequestSpec) -> tuple[float, float]:
        """``(idle_timeout_s, request_deadline_s)`` that apply to ``spec``."""
        idle, deadline = default_timeouts(spec.max_tokens or self.sampling.max_tokens)
        return (self.idle_timeout_s or idle, self.request_deadline_s or deadline)

    async def _guarded(self, work: Any, spec: RequestSpec, acc: StreamAccumulator) -> None:
        """Await ``work`` (one streamed exchange) but give up when no SSE data event came
        for the idle timeout or the whole request passed its deadline; raises TimeoutError."""
        idle_s, deadline_s = self.timeouts_for(spec)
        task = asyncio.ensure_future(work)
        start = acc.send_perf
        try:
            while True:
                now = _perf()
                left_total = start + deadline_s - now
                left_idle = acc.last_event + idle_s - now
                if left_total <= 0 or left_idle <= 0:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
                    if left_total <= 0:
                        raise TimeoutError(f"no complete answer within the request deadline of {deadline_s:g} s")
                    raise TimeoutError(f"no data event from the server for {idle_s:g} s (idle timeout)")
                done, _ = await asyncio.wait((task,), timeout=min(left_total, left_idle))
                if done:
                    task.result()
                    return
        finally:
            if not task.done():
                task.cancel()

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

