"""The small interface both transports implement, so ``StreamClient`` holds either."""

from __future__ import annotations

from typing import Protocol

from speclab.measure.client.sse import StreamAccumulator


class Transport(Protocol):
    """Moves bytes for ``StreamClient``; timing and parsing stay in ``StreamAccumulator``."""

    async def stream(self, url: str, headers: dict[str, str], body: bytes, acc: StreamAccumulator) -> None:
        """POST ``body`` and feed the response (status, then timestamped body bytes) into ``acc``."""

    async def post_json(self, url: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        """POST ``body`` and return the status and the whole response body."""

    async def aclose(self) -> None:
        """Close every connection."""
