"""speclab.measure.client: the parsing core, the httpx transport (MockTransport) and the fast
transport (a real asyncio server on 127.0.0.1), fed the stream shapes vLLM and SGLang send.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest

from speclab.errors import SpeclabError
from speclab.measure.client import (
    LoopLagMonitor,
    RequestSpec,
    Sampling,
    SSEDecoder,
    StreamAccumulator,
    StreamClient,
    measure_loop_lag,
)

KINDS = ["fast", "httpx"]
DONE = b"data: [DONE]\n\n"


# --------------------------------------------------------------------------- stream shapes


def ev(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def chunk(
    content: str | None = None,
    *,
    reasoning: str | None = None,
    reasoning_key: str = "reasoning",
    ct: int | None = None,
    ids: list[int] | None = None,
    finish: str | None = None,
    role: bool = False,
) -> bytes:
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = "assistant"
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta[reasoning_key] = reasoning
    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
    if ids is not None:
        choice["token_ids"] = ids
    obj: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [choice],
    }
    if ct is not None:
        obj["usage"] = {"prompt_tokens": 5, "completion_tokens": ct, "total_tokens": 5 + ct}
    return ev(obj)


def final_usage(ct: int, reasoning: int | None = None) -> bytes:
    usage: dict[str, Any] = {"prompt_tokens": 5, "completion_tokens": ct, "total_tokens": 5 + ct}
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return ev({"id": "chatcmpl-1", "choices": [], "usage": usage})


def payload(event: bytes) -> bytes:
    """The ``data`` payload of one encoded SSE event."""
    return event.removeprefix(b"data: ").strip()


def chat_spec(request_id: str = "r1", **kw: Any) -> RequestSpec:
    return RequestSpec(
        request_id=request_id,
        prompt_id="p1",
        category="test",
        messages=[{"role": "user", "content": "hi"}],
        **kw,
    )


# --------------------------------------------------------------------------- servers


@dataclass
class Reply:
    parts: list[bytes] = field(default_factory=list)
    status: int = 200
    content_type: str = "text/event-stream"
    framing: str = "chunked"  # "chunked" | "length" | "close"
    delay_s: float = 0.0  # before each part after the first
    stall_s: float = 0.0  # after the last part, before ending the body


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


Route = Callable[[Seen], Reply]


def stream_route(parts: list[bytes], **kw: Any) -> Route:
    """Serve ``parts`` for the chat/completions paths and {"count": 7} for /tokenize."""

    def route(req: Seen) -> Reply:
        if req.path == "/tokenize":
            return Reply(
                [b'{"count": 7, "tokens": [1,2,3,4,5,6,7]}'],
                content_type="application/json",
                framing="length",
            )
        return Reply(list(parts), **kw)

    return route


@contextlib.asynccontextmanager
async def local_server(route: Route, seen: list[Seen], conns: list[int]) -> AsyncIterator[str]:
    """A tiny HTTP/1.1 server on 127.0.0.1 (real sockets, for the fast transport)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, _, v = line.partition(":")
                        headers[k.strip().lower()] = v.strip()
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                req = Seen(method, target, headers, json.loads(raw) if raw else None)
                seen.append(req)
                reply = route(req)
                status_line = f"HTTP/1.1 {reply.status} X\r\ncontent-type: {reply.content_type}\r\n"
                if reply.framing == "chunked":
                    writer.write((status_line + "transfer-encoding: chunked\r\n\r\n").encode())
                    for i, part in enumerate(reply.parts):
                        if i and reply.delay_s:
                            await asyncio.sleep(reply.delay_s)
                        writer.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                        await writer.drain()
                    if reply.stall_s:
                        await asyncio.sleep(reply.stall_s)
                    writer.write(b"0\r\n\r\n")
                else:
                    body = b"".join(reply.parts)
                    if reply.framing == "length":
                        writer.write(f"{status_line}content-length: {len(body)}\r\n\r\n".encode())
                    else:
                        writer.write(f"{status_line}connection: close\r\n\r\n".encode())
                    writer.write(body)
                await writer.drain()
                if reply.framing == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


def mock_transport(route: Route, seen: list[Seen]) -> httpx.MockTransport:
    async def handler(request: httpx.Request) -> httpx.Response:
        raw = request.content
        req = Seen(
            request.method,
            request.url.path,
            dict(request.headers),
            json.loads(raw) if raw else None,
        )
        seen.append(req)
        reply = route(req)

        async def body() -> AsyncIterator[bytes]:
            for i, part in enumerate(reply.parts):
                if i and reply.delay_s:
                    await asyncio.sleep(reply.delay_s)
                yield part

        return httpx.Response(
            reply.status, headers={"content-type": reply.content_type}, content=body()
        )

    return httpx.MockTransport(handler)


@contextlib.asynccontextmanager
async def make_client(
    kind: str, route: Route, *, suffix: str = "", **kw: Any
) -> AsyncIterator[tuple[StreamClient, list[Seen], list[int]]]:
    seen: list[Seen] = []
    conns: list[int] = []
    if kind == "fast":
        async with (
            local_server(route, seen, conns) as url,
            StreamClient(url + suffix, "m", transport="fast", **kw) as client,
        ):
            yield client, seen, conns
    else:
        transport = mock_transport(route, seen)
        async with StreamClient(
            "http://mock.test" + suffix, "m", transport="httpx", httpx_transport=transport, **kw
        ) as client:
            yield client, seen, conns


def send_one(kind: str, route: Route, spec: RequestSpec | None = None, **kw: Any):
    async def main():
        async with make_client(kind, route, **kw) as (client, seen, _):
            rec = await client.send(spec or chat_spec(), time.perf_counter())
            return rec, seen, client

    return asyncio.run(main())


# --------------------------------------------------------------------------- through both transports


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("key", ["reasoning", "reasoning_content"])
def test_reasoning_only_stream_counts_its_tokens(kind: str, key: str) -> None:
    parts = [
        chunk("", role=True),
        chunk(reasoning="Let", reasoning_key=key),
        chunk(reasoning=" me", reasoning_key=key),
        chunk(reasoning=" think", reasoning_key=key, finish="length"),
        final_usage(3),
        DONE,
    ]
    rec, _, _ = send_one(kind, stream_route(parts))
    assert rec.ok, rec.error
    assert rec.output_tokens == 3 and rec.output_tokens_source == "usage"
    assert rec.reasoning_text == "Let me think" and rec.text == ""
    assert rec.chunks == 3 and rec.ttft_s is not None and rec.ttfa_s is None
    assert rec.finish_reason == "length"


@pytest.mark.parametrize("kind", KINDS)
def test_reasoning_then_content_has_ttfa_after_ttft(kind: str) -> None:
    parts = [
        chunk("", role=True, ct=0),
        chunk(reasoning="Hmm", ct=1),
        chunk(reasoning=" ok", ct=2),
        chunk(ct=3, ids=[99]),  # the think-end token: no text
        chunk("Yes", ct=4),
        chunk(".", ct=5, finish="stop"),
        final_usage(5),
        DONE,
    ]
    rec, _, _ = send_one(kind, stream_route(parts, delay_s=0.02))
    assert rec.ok, rec.error
    assert rec.ttft_s is not None and rec.ttfa_s is not None
    assert rec.ttfa_s > rec.ttft_s + 0.03
    assert rec.text == "Yes." and rec.reasoning_text == "Hmm ok"
    assert rec.reasoning_tokens == 2 and rec.answer_tokens == 3
    assert rec.chunk_tokens == [1, 1, 1, 1, 1]


@pytest.mark.parametrize("kind", KINDS)
def test_multi_token_chunks_with_continuous_usage(kind: str) -> None:
    parts = [
        chunk("", role=True, ct=0),
        chunk("a b c", ct=3, ids=[1, 2, 3]),
        chunk(" d e f g", ct=7, ids=[4, 5, 6, 7]),
        chunk(" h i", ct=9, ids=[8, 9], finish="stop"),
        final_usage(9),
        DONE,
    ]
    rec, _, _ = send_one(kind, stream_route(parts, delay_s=0.01))
    assert rec.ok, rec.error
    assert rec.chunks == 3 and rec.chunk_tokens == [3, 4, 2]
    assert rec.output_tokens == 9 and rec.tokens_per_chunk_mean == 3.0
    assert rec.token_ids == list(range(1, 10))
    assert rec.prompt_tokens == 5
    assert rec.tpot_s == pytest.approx((rec.e2e_s - rec.ttft_s) / 8)
    assert len(rec.chunk_offsets_s) == 3 and rec.chunk_offsets_s == sorted(rec.chunk_offsets_s)
    assert rec.e2e_s == rec.chunk_offsets_s[-1]


@pytest.mark.parametrize("kind", KINDS)
def test_missing_usage_falls_back_to_server_tokenize(kind: str) -> None:
    parts = [chunk("Hello"), chunk(" world", finish="stop"), DONE]
    rec, seen, _ = send_one(kind, stream_route(parts))
    assert rec.ok, rec.error
    assert rec.output_tokens == 7 and rec.output_tokens_source == "tokenize"
    tok = [s for s in seen if s.path == "/tokenize"]
    assert len(tok) == 1
    assert tok[0].body == {"model": "m", "prompt": "Hello world", "add_special_tokens": False}
    assert rec.tpot_s == pytest.approx((rec.e2e_s - rec.ttft_s) / 6)


@pytest.mark.parametrize("kind", KINDS)
def test_sse_comments_pings_event_lines_and_done(kind: str) -> None:
    split = chunk(" there", ct=2)
    parts = [
        b": ping\n\n",
        b"event: message\r\n" + chunk("Hi", ct=1).replace(b"\n", b"\r\n"),
        b"\n",  # blank keep-alive
        b": ping - 2026-11-29 12:00:00\n\n" + split[:17],
        split[17:],
        b"id: 4\nretry: 100\n\n",
        final_usage(2),
        DONE,
    ]
    rec, _, _ = send_one(kind, stream_route(parts))
    assert rec.ok, rec.error
    assert rec.text == "Hi there" and rec.chunks == 2 and rec.output_tokens == 2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "error_event",
    [
        {"error": {"message": "boom: engine died", "type": "InternalServerError", "code": 500}},
        {"object": "error", "message": "boom: engine died", "type": "BadRequestError", "code": 400},
    ],
)
def test_error_mid_stream_becomes_record_error(kind: str, error_event: dict) -> None:
    parts = [chunk("Partial", ct=1), ev(error_event), DONE]
    rec, _, _ = send_one(kind, stream_route(parts))
    assert not rec.ok and rec.http_status == 200
    assert "boom: engine died" in (rec.error or "")
    assert rec.text == "Partial" and rec.chunks == 1


@pytest.mark.parametrize("kind", KINDS)
def test_http_404_keeps_status_and_server_text(kind: str) -> None:
    body = orjson.dumps({"error": {"message": "The model `m` does not exist.", "code": 404}})
    route = lambda req: Reply([body], status=404, content_type="application/json", framing="length")
    rec, _, _ = send_one(kind, route)
    assert not rec.ok and rec.http_status == 404
    assert rec.error == "HTTP 404: The model `m` does not exist."
    assert rec.chunks == 0 and rec.output_tokens is None


@pytest.mark.parametrize("kind", KINDS)
def test_base_url_ending_in_v1_hits_the_path_exactly_once(kind: str) -> None:
    parts = [chunk("ok", ct=1), final_usage(1), DONE]
    rec, seen, _ = send_one(kind, stream_route(parts), suffix="/v1/")
    assert rec.ok, rec.error
    assert [s.path for s in seen] == ["/v1/chat/completions"]


@pytest.mark.parametrize("kind", KINDS)
def test_completions_prompt_goes_to_v1_completions(kind: str) -> None:
    text = lambda t, ct: ev(
        {
            "choices": [{"index": 0, "text": t, "finish_reason": None}],
            "usage": {"prompt_tokens": 2, "completion_tokens": ct},
        }
    )
    parts = [text("one", 1), text(" two", 2), final_usage(2), DONE]
    spec = RequestSpec("r1", "p1", "test", prompt="count:", max_tokens=2)
    rec, seen, _ = send_one(kind, stream_route(parts), spec=spec)
    assert rec.ok, rec.error
    assert seen[0].path == "/v1/completions"
    assert seen[0].body["prompt"] == "count:" and "messages" not in seen[0].body
    assert "chat_template_kwargs" not in seen[0].body and seen[0].body["max_tokens"] == 2
    assert rec.text == "one two" and rec.output_tokens == 2


@pytest.mark.parametrize("kind", KINDS)
def test_request_body_is_explicit(kind: str) -> None:
    sampling = Sampling(
        max_tokens=64, chat_template_kwargs={"enable_thinking": True}, extra_body={"top_k": 5}
    )
    parts = [chunk("ok", ct=1), final_usage(1), DONE]
    _, seen, _ = send_one(
        kind, stream_route(parts), spec=chat_spec(max_tokens=32), sampling=sampling
    )
    body = seen[0].body
    assert body["model"] == "m" and body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["max_tokens"] == 32 and body["temperature"] == 0.0
    assert "seed" in body and body["seed"] is None and body["ignore_eos"] is False
    assert body["chat_template_kwargs"] == {"enable_thinking": True} and body["top_k"] == 5
    assert body["stream"] is True and body["return_token_ids"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert seen[0].headers["accept-encoding"] == "identity"


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_field_400_retries_once_without_extras(kind: str) -> None:
    good = [chunk("ok"), final_usage(1), DONE]
    reject = orjson.dumps(
        {"error": {"message": "Unrecognized request argument supplied: return_token_ids"}}
    )

    def route(req: Seen) -> Reply:
        if "return_token_ids" in req.body:
            return Reply([reject], status=400, content_type="application/json", framing="length")
        return Reply(list(good))

    async def main():
        async with make_client(kind, route) as (client, seen, _):
            t0 = time.perf_counter()
            first = await asyncio.gather(
                client.send(chat_spec("a"), t0), client.send(chat_spec("b"), t0)
            )
            third = await client.send(chat_spec("c"), t0)
            return [*first, third], seen, client.capabilities

    recs, seen, caps = asyncio.run(main())
    assert all(r.ok for r in recs), [r.error for r in recs]
    assert caps["return_token_ids"] is False and caps["continuous_usage_stats"] is False
    assert "return_token_ids" in caps["downgraded_because"]
    # Each send that was rejected retried once, lean; later sends went lean at once.
    rejected = [s for s in seen if "return_token_ids" in s.body]
    lean = [s for s in seen if "return_token_ids" not in s.body]
    assert 1 <= len(rejected) <= 2 and len(lean) == 3
    assert seen[-1] in lean and seen[0] in rejected
    assert all(s.body["stream_options"] == {"include_usage": True} for s in lean)


@pytest.mark.parametrize("kind", KINDS)
def test_api_key_is_sent_but_never_recorded(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-secret-4242"
    monkeypatch.setenv("SPECLAB_TEST_KEY", secret)
    parts = [chunk("ok", ct=1), final_usage(1), DONE]
    rec, seen, client = send_one(kind, stream_route(parts), api_key_env="SPECLAB_TEST_KEY")
    assert seen[0].headers["authorization"] == f"Bearer {secret}"
    assert secret not in json.dumps(rec.to_row())
    assert secret not in repr(rec) and secret not in repr(client)
    assert "SPECLAB_TEST_KEY" not in json.dumps(rec.to_row())


def test_missing_api_key_env_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECLAB_NO_SUCH_KEY", raising=False)
    with pytest.raises(SpeclabError, match="SPECLAB_NO_SUCH_KEY"):
        StreamClient("http://127.0.0.1:1", "m", api_key_env="SPECLAB_NO_SUCH_KEY")


@pytest.mark.parametrize("kind", KINDS)
def test_non_streamed_json_answer_is_still_counted(kind: str) -> None:
    body = orjson.dumps(
        {
            "choices": [{"index": 0, "message": {"content": "whole"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        }
    )
    route = lambda req: Reply([body], content_type="application/json", framing="length")
    rec, _, _ = send_one(kind, route)
    assert rec.ok, rec.error
    assert rec.text == "whole" and rec.output_tokens == 1


def send_via_httpx(handler: Callable[[httpx.Request], httpx.Response]) -> Any:
    """One chat request through the httpx transport on a MockTransport ``handler``; its record."""

    async def main():
        async with StreamClient(
            "http://mock.test", "m", transport="httpx", httpx_transport=httpx.MockTransport(handler)
        ) as client:
            return await client.send(chat_spec(), time.perf_counter())

    return asyncio.run(main())


def test_httpx_connection_error_becomes_record() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    rec = send_via_httpx(handler)
    assert not rec.ok and rec.http_status is None and "ConnectError" in (rec.error or "")


@pytest.mark.parametrize("drops", [1, 2])
def test_httpx_resends_once_on_a_keepalive_connection_closed_before_answering(drops: int) -> None:
    """h11's "without sending a response": the pooled connection was already closed by the
    server (a keep-alive timeout, a server that closes after a stream) and the request never
    arrived; one resend, as the fast transport does, and a second failure is the record's."""
    calls: list[int] = []
    body = chunk("a", ct=1) + final_usage(1) + DONE

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) <= drops:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    rec = send_via_httpx(handler)
    assert len(calls) == 2
    if drops == 1:
        assert rec.ok and rec.text == "a" and rec.output_tokens == 1, rec.error
    else:
        assert not rec.ok and "RemoteProtocolError" in (rec.error or "")


def test_httpx_does_not_resend_after_the_answer_began() -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")

    rec = send_via_httpx(handler)
    assert len(calls) == 1 and not rec.ok


# --------------------------------------------------------------------------- fast transport


@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
def test_fast_transport_reads_every_body_framing(framing: str) -> None:
    parts = [chunk("", role=True, ct=0), chunk("a", ct=1), chunk("b", ct=3), final_usage(3), DONE]

    async def main():
        async with make_client("fast", stream_route(parts, framing=framing)) as (
            client,
            _,
            conns,
        ):
            t0 = time.perf_counter()
            recs = [await client.send(chat_spec(str(i)), t0) for i in range(3)]
            return recs, conns

    recs, conns = asyncio.run(main())
    for rec in recs:
        assert rec.ok, rec.error
        assert rec.text == "ab" and rec.chunk_tokens == [1, 2] and rec.output_tokens == 3
    # keep-alive reuses one connection unless the server closes after each answer
    assert len(conns) == (3 if framing == "close" else 1)
    assert recs[1].send_time_s > recs[0].send_time_s


def test_fast_transport_survives_a_server_dropping_idle_connections() -> None:
    parts = [chunk("a", ct=1), final_usage(1), DONE]
    seen: list[Seen] = []
    conns: list[int] = []

    async def main():
        async with (
            local_server(stream_route(parts, framing="length"), seen, conns) as url,
            StreamClient(url, "m") as client,
        ):
            first = await client.send(chat_spec("a"), time.perf_counter())
            for conn in list(client._impl._all):  # the server "times out" the idle socket
                conn.transport.abort()
            second = await client.send(chat_spec("b"), time.perf_counter())
            return first, second

    first, second = asyncio.run(main())
    assert first.ok and second.ok, (first.error, second.error)
    assert len(conns) == 2


def test_fast_transport_connection_refused_becomes_record() -> None:
    async def main():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        async with StreamClient(f"http://127.0.0.1:{port}", "m", connect_timeout_s=2) as client:
            return await client.send(chat_spec(), time.perf_counter())

    rec = asyncio.run(main())
    assert not rec.ok and rec.http_status is None and rec.error


def test_fast_transport_read_timeout_becomes_record() -> None:
    parts = [chunk("a", ct=1)]

    async def main():
        async with make_client("fast", stream_route(parts, stall_s=1.0), read_timeout_s=0.2) as (
            client,
            _,
            _,
        ):
            return await client.send(chat_spec(), time.perf_counter())

    rec = asyncio.run(main())
    assert not rec.ok and rec.http_status == 200
    assert "timeout" in (rec.error or "") and rec.text == "a" and rec.chunks == 1


def test_fast_transport_connection_cut_mid_stream_becomes_record() -> None:
    async def main():
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            part = chunk("a", ct=1)
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            writer.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with StreamClient(f"http://127.0.0.1:{port}", "m") as client:
            rec = await client.send(chat_spec(), time.perf_counter())
        server.close()
        return rec

    rec = asyncio.run(main())
    assert not rec.ok and "mid-response" in (rec.error or "") and rec.text == "a"


# --------------------------------------------------------------------------- parsing core


def test_sse_decoder_is_indifferent_to_read_boundaries() -> None:
    stream = (
        b': ping\n\nevent: x\ndata: {"a": 1}\r\n\r\ndata: line1\ndata: line2\n\ndata:[DONE]\n\n'
    )
    expected = [b'{"a": 1}', b"line1\nline2", b"[DONE]"]
    for step in (1, 3, 7, len(stream)):
        got: list[bytes] = []
        dec = SSEDecoder(lambda t, d, got=got: got.append(d))
        for i in range(0, len(stream), step):
            dec.feed(stream[i : i + step], 0.0)
        dec.close(0.0)
        assert got == expected, step
    got = []
    dec = SSEDecoder(lambda t, d: got.append(d))
    dec.feed(b'data: {"last": true}', 0.0)  # no closing blank line before EOF
    dec.close(0.0)
    assert got == [b'{"last": true}']


def test_accumulator_usage_details_and_token_id_counts() -> None:
    acc = StreamAccumulator(chat_spec(), send_perf=10.0, t0=9.0)
    acc.http_status = 200
    acc.feed(10.5, payload(chunk(reasoning="r", ids=[1, 2])))
    acc.feed(10.7, payload(chunk("x", ids=[3])))
    acc.feed(10.8, payload(final_usage(3, reasoning=2)))
    rec = acc.finish()
    assert rec.send_time_s == 1.0 and rec.ttft_s == pytest.approx(0.5)
    assert rec.ttfa_s == pytest.approx(0.7) and rec.e2e_s == pytest.approx(0.7)
    assert rec.reasoning_tokens == 2 and rec.answer_tokens == 1 and rec.output_tokens == 3

    acc = StreamAccumulator(chat_spec(), send_perf=0.0, t0=0.0)
    acc.http_status = 200
    acc.feed(0.1, payload(chunk("x", ids=[3, 4])).decode())  # str works too
    acc.feed(0.2, b"[DONE]")
    rec = acc.finish()
    assert rec.output_tokens == 2 and rec.output_tokens_source == "token_ids" and acc.done


def test_accumulator_flags_garbage_and_empty_streams() -> None:
    acc = StreamAccumulator(chat_spec(), 0.0, 0.0)
    acc.http_status = 200
    acc.feed(0.1, b"<html>oops</html>")
    assert "not JSON" in (acc.finish().error or "")
    acc = StreamAccumulator(chat_spec(), 0.0, 0.0)
    acc.http_status = 200
    acc.feed(0.1, b"[DONE]")
    rec = acc.finish()
    assert not rec.ok and "without carrying any token" in (rec.error or "")


def test_request_spec_needs_messages_or_prompt() -> None:
    with pytest.raises(SpeclabError):
        RequestSpec("r", "p", "c")
    with pytest.raises(SpeclabError):
        RequestSpec("r", "p", "c", messages=[], prompt="x")


def test_loop_lag_monitor_sees_a_blocked_loop() -> None:
    async def main():
        monitor = LoopLagMonitor(interval_s=0.01)
        monitor.start()
        await asyncio.sleep(0.05)
        time.sleep(0.08)  # noqa: ASYNC251 - the harness "busy" for 80 ms, on purpose
        await asyncio.sleep(0.05)
        summary = await monitor.stop()
        async with measure_loop_lag() as idle:
            await asyncio.sleep(0.05)
        return summary, idle.summary()

    busy, idle = asyncio.run(main())
    assert busy["max_s"] >= 0.06 and busy["samples"] >= 5
    assert busy["p50_s"] < 0.02
    assert idle["samples"] >= 2 and idle["max_s"] < 0.05
