"""Per-request input and output shapes: what is asked, and what one streamed response measured."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
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


