"""Stream shapes as vLLM and SGLang send them, and the two servers the client tests send them from:
a real asyncio server on 127.0.0.1 for the fast transport, an ``httpx.MockTransport`` for the httpx
one (``make_client`` and ``send_one`` pick by ``kind``)."""

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

from speclab.measure.client import RequestSpec, StreamClient

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
