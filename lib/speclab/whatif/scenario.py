"""The what-if scenario: one deployment, described by what is known before any restart.

The schema (``docs/whatif.md``, section 1) keeps its key names: ``model.config`` (the model's
``config.json``, nested ``text_config`` allowed), ``hardware`` (GPU, count, interconnect),
``parallel``, ``engine``, ``option`` (method, k, acceptance), ``workload`` and ``baseline`` (by
concurrency). Unknown keys are kept and ignored; a published case adds ``published``.

What the schema allows but the step model cannot use (``k`` or acceptance not given, a
baseline with no concurrency) is not a validation error: :func:`missing` names it in one
sentence, and the what-if refuses the scenario with that sentence.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from speclab.errors import SpeclabError, explain_validation_error

__all__ = ["Baseline", "Engine", "Hardware", "Option", "Parallel", "Scenario", "Workload", "load_scenario",
           "load_scenarios", "missing", "scenario_from_dict"]

Metric = Literal["output_tok_s", "tpot_ms", "e2e_latency_ms"]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", protected_namespaces=())


class ModelSpec(_Open):
    name: str | None = None
    config: dict[str, Any] = Field(default_factory=dict, description="the model's config.json keys")
    weight_bits: float | None = Field(None, description="bits of the (expert) weights as served: 16, 8 or 4")
    dense_weight_bits: float | None = Field(None, description="bits of the non-expert weights (default: assumed "
                                                              "between weight_bits and 16)")
    kv_cache_bits: float | None = 16


class Hardware(_Open):
    gpu: str | None = None
    count: int = Field(1, ge=1)
    interconnect: str | None = None
    allreduce_bus_gb_s: float | None = Field(None, gt=0)


class Parallel(_Open):
    tensor: int = Field(1, ge=1)
    expert: int = Field(1, ge=1)
    pipeline: int = Field(1, ge=1)
    attention_data_parallel: int = Field(1, ge=1)


class Overlap(_Open):
    baseline: bool | None = None
    option: bool | None = None
    source: str | None = None


class Engine(_Open):
    name: str | None = None
    version: str | None = None
    overlap: Overlap | None = Field(None, description="what a source states about scheduling overlap in each arm")

    @field_validator("version", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return None if value is None else str(value)


class Option(_Open):
    method: str | None = None
    k: int | None = Field(None, ge=1)
    acceptance_length: float | None = None
    acceptance_per_position: list[float] | None = None
    acceptance_source: str | None = None
    acceptance_length_range: list[float] | None = None
    tree: bool = False
    per_batch_schedule: bool = False
    draft_passes: int | None = Field(None, ge=1)


class Workload(_Open):
    input_tokens: int | None = None
    output_tokens: int | None = None


class Baseline(_Open):
    metric: Metric = "output_tok_s"
    values: dict[int, float | None] = Field(default_factory=dict)
    per_user: bool = Field(False, description="output_tok_s values are per user (multiply by concurrency)")

    def step_ms(self, concurrency: int, output_tokens: int | None = None) -> float | None:
        """The published decode step (ms) at one concurrency, or ``None`` where not given."""
        value = self.values.get(concurrency)
        if value is None or value <= 0:
            return None
        if self.metric == "output_tok_s":
            total = value * concurrency if self.per_user else value
            return 1e3 * concurrency / total
        if self.metric == "tpot_ms":
            return float(value)
        return float(value) / output_tokens if output_tokens else None


class Scenario(_Open):
    name: str = "scenario"
    source: str | None = None
    model: ModelSpec = Field(default_factory=ModelSpec)
    hardware: Hardware = Field(default_factory=Hardware)
    parallel: Parallel = Field(default_factory=Parallel)
    engine: Engine = Field(default_factory=Engine)
    option: Option = Field(default_factory=Option)
    workload: Workload = Field(default_factory=Workload)
    baseline: Baseline = Field(default_factory=Baseline)

    @property
    def concurrencies(self) -> list[int]:
        return sorted(self.baseline.values)

    @property
    def acceptance_label(self) -> Literal["measured", "published", "assumed"]:
        text = (self.option.acceptance_source or "assumed").strip().lower()
        if text.startswith("measured"):
            return "measured"
        if text.startswith("published"):
            return "published"
        return "assumed"

    def acceptance_length(self) -> float | None:
        """Mean tokens per step incl. the bonus token: given, or from the per-position rates
        (``1 + p1 + p1 p2 + ...``, conditional rates)."""
        if self.option.acceptance_length is not None:
            return float(self.option.acceptance_length)
        rates = self.option.acceptance_per_position
        if rates:
            total, survive = 1.0, 1.0
            for p in rates:
                survive *= float(p)
                total += survive
            return total
        return None


def missing(scenario: Scenario) -> str | None:
    """One sentence naming what the what-if needs and the scenario lacks, or ``None``."""
    opt = scenario.option
    if not scenario.baseline.values:
        return "baseline.values names no concurrency, so there is no row to predict."
    if not opt.method:
        return "option.method is not given."
    if opt.k is None:
        return "option.k (draft tokens per step) is not given."
    al = scenario.acceptance_length()
    if al is None:
        return ("option.acceptance_length (or acceptance_per_position) is not given, and the what-if does not "
                "invent acceptance.")
    if al < 1.0:
        return f"option.acceptance_length is {al:g}; it counts the bonus token, so it is at least 1."
    if al > opt.k + 1 + 1e-9 and not opt.tree:
        return f"option.acceptance_length {al:g} is above k + 1 = {opt.k + 1}, which one step cannot accept."
    if not scenario.engine.name:
        return "engine.name is not given."
    if not scenario.hardware.gpu:
        return "hardware.gpu is not given."
    if not scenario.model.config:
        return "model.config (the model's config.json keys) is not given."
    par = scenario.parallel
    if (par.tensor > 1 or par.pipeline > 1) and not scenario.hardware.interconnect:
        return (f"hardware.interconnect is not given, and tensor {par.tensor} x pipeline {par.pipeline} "
                "needs one between the GPUs.")
    return None


def scenario_from_dict(data: Any, where: str = "the scenario") -> Scenario:
    """A :class:`Scenario` from a parsed YAML mapping, with one sentence on a wrong value."""
    if not isinstance(data, dict):
        raise SpeclabError(f"{where} must be a mapping of the scenario's keys (name, model, hardware, ...).")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        err = explain_validation_error(exc, what=where)
        raise SpeclabError(err.message) from None


def _read_yaml(path: str | Path) -> Any:
    file = Path(path)
    try:
        return yaml.safe_load(file.read_text())
    except FileNotFoundError:
        raise SpeclabError(f"The scenario file {file} does not exist; check the path.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise SpeclabError(f"{file}{where} is not valid YAML; fix it and run again.") from None


def load_scenario(path: str | Path) -> Scenario:
    """One scenario from a YAML file (a mapping; a one-item list is accepted too)."""
    data = _read_yaml(path)
    if isinstance(data, list) and len(data) == 1:
        data = data[0]
    return scenario_from_dict(data, where=str(path))


def load_scenarios(path: str | Path) -> list[dict[str, Any]]:
    """A list of scenario mappings (the published cases), unvalidated: each is validated when predicted."""
    data = _read_yaml(path)
    if not isinstance(data, list):
        raise SpeclabError(f"{path} must hold a list of scenarios.")
    return [dict(d) for d in data if isinstance(d, dict)]
