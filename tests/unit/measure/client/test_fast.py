"""The fast transport (speclab.measure.client.fast) against a real asyncio server on 127.0.0.1: every
body framing, keep-alive, and each way a connection fails becoming a record."""

from __future__ import annotations

import asyncio
import time

import pytest

from speclab.measure.client import StreamClient
from tests.unit.measure.client.helpers import (
    DONE,
    Seen,
    chat_spec,
    chunk,
    final_usage,
    local_server,
    make_client,
    stream_route,
)


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
