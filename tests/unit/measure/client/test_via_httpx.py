"""The httpx transport (speclab.measure.client.via_httpx) on an ``httpx.MockTransport``: connection
errors become records, and a request a pooled connection dropped unsent is sent once more."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from speclab.measure.client import StreamClient
from tests.unit.measure.client.helpers import DONE, chat_spec, chunk, final_usage


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
