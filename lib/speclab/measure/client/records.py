"""Per-request input and output shapes: what is asked, and what one streamed response measured."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from speclab.errors import SpeclabError

TransportName = Literal["fast", "httpx"]


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


