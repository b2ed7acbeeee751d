"""The sweep, defined once: what to send and how hard.

Notebook params (:mod:`speclab.params`) inherit these fields, ``speclab bench`` builds its
flags and ``-p file.yaml -p key=value`` front end from them, and every run that sweeps stores
``SweepConfig.model_dump()`` as the manifest's ``sweep``. Change a field here and all three
follow.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt


class SweepConfig(BaseModel):
    """What to send and how hard: the same fields in params files, the CLI and notebooks."""

    model_config = ConfigDict(extra="forbid")

    concurrency: list[PositiveInt] = Field([1, 4, 8], min_length=1, description="concurrency levels to sweep")
    rate: float | None = Field(
        None, gt=0, allow_inf_nan=False,
        description="Poisson arrivals (req/s) instead of closed loop; concurrency caps in-flight")
    prompts: str | None = Field(None, description="None = built-in sets; or a .jsonl / ShareGPT .json file")
    categories: list[str] | None = Field(None, description="categories to run (None = all)")
    per_category: int = Field(3, ge=1, description="prompts per category per level and repeat")
    rounds: int = Field(
        2, ge=1, le=100,
        description="closed loop: a level at concurrency c runs at least rounds x c requests, so c are really in flight")
    level_duration_s: float | None = Field(
        None, gt=0, allow_inf_nan=False,
        description="closed loop: keep each level's slots full this many seconds (the plan's requests repeat in order)")
    repeats: int = Field(1, ge=1, le=20, description="repeats of each level (distinct prompts each)")
    warmup_requests: int = Field(2, ge=0, description="unmeasured requests before each level")
    max_tokens: int | None = Field(None, ge=1, description="override each prompt's max_tokens")
    temperature: float = Field(0.0, ge=0.0, allow_inf_nan=False, description="0 = greedy (lossless comparisons)")
    seed: int | None = Field(0, description="sampling seed sent with every request")
    ignore_eos: bool = Field(False, description="true distorts acceptance (vllm#52536); keep false")
    thinking: bool | None = Field(None, description="reasoning models: chat_template_kwargs enable_thinking")
    transport: Literal["fast", "httpx"] = Field("fast", description="fast = raw asyncio reader (the hot path)")
    workers: int = Field(1, ge=1, le=64, description="client processes sharing the streams")
    reuse_prompts: bool = Field(False, description="allow the same prompt in several levels")
    reset_prefix_cache: bool = Field(True, description="POST /reset_prefix_cache before each level where served")
    request_timeout_s: float | None = Field(
        None, gt=0, allow_inf_nan=False,
        description="per-request deadline in seconds (None: 120 s + 2 s per max token)")
    idle_timeout_s: float | None = Field(
        None, gt=0, allow_inf_nan=False,
        description="seconds without an SSE data event before a request fails; pings do not count (None: 300)")
    api_key_env: str | None = Field(None, description="env var holding the API key (never stored)")

    def level_requests(self, concurrency: int, categories: int) -> int:
        """Requests a level plans: ``per_category`` of each category, and in closed loop at
        least ``rounds`` waves of ``concurrency`` (a level of 28 requests never has 32 in flight)."""
        base = self.per_category * categories
        return base if self.rate is not None else max(base, self.rounds * concurrency)

    def chat_template_kwargs(self) -> dict[str, Any] | None:
        """What the chat template is told (``enable_thinking``), None when ``thinking`` is unset."""
        return None if self.thinking is None else {"enable_thinking": self.thinking}

    def sweep_only(self) -> SweepConfig:
        """This sweep's own fields (drops those of a params model that inherits them)."""
        return SweepConfig.model_validate(self.model_dump(include=set(SweepConfig.model_fields)))
