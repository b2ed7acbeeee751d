"""The transport interface on ``httpx.AsyncClient`` (injectable, so unit tests run on
``httpx.MockTransport``); fine for notebooks and light loads."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from speclab.measure.client.sse import SSEDecoder, StreamAccumulator

_perf = time.perf_counter
T = TypeVar("T")


def _stale(exc: Exception) -> bool:
    """True for the error of a pooled keep-alive connection the server had already closed
    (h11 saw the close before any byte of an answer): the request never reached the server,
    so it is sent once more on a fresh connection, as the fast transport does. A disconnect
    after the answer began reads differently and stays an error."""
    return "without sending a response" in str(exc)


class HttpxTransport:
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

    async def _resending_once_if_stale(self, send: Callable[[], Awaitable[T]]) -> T:
        """``send()``, and once more when the pooled connection was already closed (:func:`_stale`)."""
        try:
            return await send()
        except self._httpx.RemoteProtocolError as exc:
            if not _stale(exc):
                raise
        return await send()

    async def stream(
        self, url: str, headers: dict[str, str], body: bytes, acc: StreamAccumulator
    ) -> None:
        await self._resending_once_if_stale(lambda: self._stream_once(url, headers, body, acc))

    async def _stream_once(
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
        resp = await self._resending_once_if_stale(lambda: self.client.post(url, content=body, headers=headers))
        return resp.status_code, resp.content

    async def aclose(self) -> None:
        await self.client.aclose()

