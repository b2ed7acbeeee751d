"""The run-folder format: file names, the request record, the level schema, the sweep plan,
and the readers. Everything that writes or reads a run folder uses these names; this module
imports only the runs layer below it (folders, manifests, JSON) and the prompt vocabulary.

A sweep's folder holds ``manifest.json`` (written first, finalised last), ``requests.jsonl``
(one row per request, appended as it finishes), ``levels.jsonl`` (one object per level as it
ends), ``summary.json`` (``{"levels": [...]}`` with every key of :data:`LEVEL_KEYS`),
``requests.parquet`` (the same rows, tidy), ``plan.json`` + ``prompts.jsonl`` (which prompt ran
where, so another arm repeats it exactly). See outputs/README.md and docs/architecture.md.

Every file name a run folder may hold is defined here, beside the records those files carry
(probe points, head pairs, the server's identity), so that a reader of a folder (05-report, a
prediction made later on another machine) needs no measurement code to read it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar, overload

import orjson
import pandas as pd
from pydantic import BaseModel, Field

from speclab.errors import SpeclabError
from speclab.prompts import Prompt, load_jsonl
from speclab.runs import MANIFEST, list_runs, read_json, utc_now, write_json
from speclab.urls import strip_credentials_in_text

# --------------------------------------------------------------------------- every file of a run folder

# a sweep (01, 02, 03 and the calibration's arms)
REQUESTS_JSONL = "requests.jsonl"
LEVELS_JSONL = "levels.jsonl"
PLAN_JSON = "plan.json"
PROMPTS_JSONL = "prompts.jsonl"
SUMMARY_JSON = "summary.json"
REQUESTS_PARQUET = "requests.parquet"
# 01-baseline's prediction: the step model's record, the predictions, the self-check, the probe
COST_MODEL_JSON = "cost_model.json"
PREDICTIONS_PARQUET = "predictions.parquet"
SELF_DIVERGENCE_JSON = "self_divergence.json"
SELF_CHECK_DIR = "self-check"
CALIBRATION_DIR = "calibration"
PROBE_JSON = "probe.json"
PROBE_JSONL = "probe.jsonl"
HEAD_JSONL = "probe-head.jsonl"
RECOMMENDED_CONFIG_JSON = "recommended-config.json"
PROPOSER_JSON = "proposer.json"
# 00-profile
CAPTURE_JSON = "profile_capture.json"
PROFILE_PARAMS_JSON = "profile_params.json"
# 03-eagle3-drafter
OFFLINE_TOKENS_JSONL = "offline-tokens.jsonl"
OFFLINE_PREDICTION_JSON = "offline-prediction.json"
STEP_TIME_JSON = "step-time.json"
# 04-moespec
MOE_BENCH_JSON = "moe_layer_bench.json"
# a traffic-log replay
REPLAY_SETTINGS_JSON = "replay_settings.json"

# Every level object in summary.json carries each of these keys (None where not applicable);
# extra keys sit beside them.
LEVEL_KEYS = (
    "concurrency", "rate", "requests", "errors", "output_tokens", "duration_s", "output_tok_s",
    "ttft_s_median", "ttft_s_p99", "tpot_s_median", "tpot_s_p99", "e2e_s_median",
    "tokens_per_chunk_mean", "acceptance_rate", "mean_acceptance_length",
    "server_tpot_s_mean", "server_ttft_s_mean", "foreign_traffic",
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
    truncated: bool = False  # the stream ended without finish_reason or [DONE]

    @property
    def ok(self) -> bool:
        """True when the server answered 200 and the stream completed without error."""
        return self.error is None and self.http_status == 200

    def to_row(self) -> dict[str, Any]:
        """A plain dict (JSON- and pandas-ready) including ``ok``."""
        row = {f.name: getattr(self, f.name) for f in fields(self)}
        row["ok"] = self.ok
        if self.error:  # an error body may quote what was sent (a proxy echoing a header)
            row["error"] = strip_credentials_in_text(self.error)
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


@dataclass
class PlannedRequest:
    level: int
    concurrency: int
    rate: float | None
    repeat: int
    prompt_id: str
    category: str
    max_tokens: int | None


@dataclass
class Plan:
    """Which prompt runs at which level/repeat, in send order. Saved with every run."""

    requests: list[PlannedRequest]
    prompts: dict[str, Prompt]
    reused_prompts: bool = False
    notes: list[str] = field(default_factory=list)  # why prompts repeat, shown to the user

    def levels(self) -> list[tuple[int, int, float | None, int]]:
        seen: dict[int, tuple[int, int, float | None, int]] = {}
        for r in self.requests:
            seen.setdefault(r.level, (r.level, r.concurrency, r.rate, r.repeat))
        return [seen[k] for k in sorted(seen)]

    def for_level(self, level: int) -> list[PlannedRequest]:
        return [r for r in self.requests if r.level == level]

    def save(self, folder: Path) -> None:
        with open(folder / PROMPTS_JSONL, "wb") as handle:
            for prompt in self.prompts.values():
                handle.write(orjson.dumps(prompt.to_json()) + b"\n")
        write_json(folder / PLAN_JSON, {
            "reused_prompts": self.reused_prompts,
            "notes": self.notes,
            "requests": [r.__dict__ for r in self.requests],
        })

    @classmethod
    def load(cls, folder: str | Path) -> Plan:
        folder = Path(folder)
        if not (folder / PLAN_JSON).exists():
            raise SpeclabError(
                f"{folder} holds no {PLAN_JSON}; choose a run folder made by a sweep (01-baseline)."
            )
        data = read_json(folder / PLAN_JSON)
        prompts = {p.id: p for p in load_jsonl(folder / PROMPTS_JSONL)}
        requests = [PlannedRequest(**r) for r in data["requests"]]
        return cls(requests, prompts, bool(data.get("reused_prompts")), list(data.get("notes") or []))


def read_records(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every request row of a run, from requests.jsonl (a torn last line is skipped)."""
    path = Path(run_dir) / REQUESTS_JSONL
    rows: list[dict[str, Any]] = []
    if not path.exists():
        return rows
    with open(path, "rb") as handle:
        for line in handle:
            with contextlib.suppress(orjson.JSONDecodeError):
                rows.append(orjson.loads(line))
    return rows


def write_parquet(run_dir: str | Path) -> Path | None:
    """requests.parquet from requests.jsonl: one tidy row per request."""
    rows = read_records(run_dir)
    if not rows:
        return None
    frame = pd.DataFrame(rows)
    for column in ("chunk_offsets_s", "chunk_tokens", "token_ids", "prompt_token_ids", "tags", "error_examples"):
        if column in frame:
            frame[column] = frame[column].map(lambda v: orjson.dumps(v).decode() if v is not None else None)
    target = Path(run_dir) / REQUESTS_PARQUET
    frame.to_parquet(target, index=False)
    return target


def iter_levels(run_dir: str | Path) -> Iterable[dict[str, Any]]:
    return read_json(Path(run_dir) / SUMMARY_JSON)["levels"]


@dataclass
class RunData:
    """One run folder's manifest, requests (one row each) and levels (one row each)."""

    path: Path
    manifest: dict[str, Any]
    requests: pd.DataFrame
    levels: pd.DataFrame

    @property
    def kind(self) -> str:
        return str(self.manifest.get("kind"))

    @property
    def server(self) -> dict[str, Any]:
        return self.manifest.get("server") or {}

    @property
    def arm(self) -> str:
        """The option measured: baseline, ngram, suffix, ..."""
        if not self.levels.empty and "arm" in self.levels:
            return str(self.levels["arm"].iloc[0])
        return str((self.manifest.get("params") or {}).get("method") or "baseline")

    @property
    def label(self) -> str:
        spec = self.server.get("speculative_config") or {}
        k = spec.get("num_speculative_tokens")
        return f"{self.arm} k={k}" if k and self.arm != "baseline" else self.arm


def load_run(path: str | Path) -> RunData:
    """A run folder; a missing summary (crashed run) still gives whatever requests exist."""
    folder = Path(path)
    if not (folder / MANIFEST).exists():
        raise SpeclabError(f"{folder} is not a speclab run folder (no {MANIFEST}); check the path.")
    manifest = read_json(folder / MANIFEST)
    requests = pd.DataFrame(read_records(folder))
    levels = pd.DataFrame()
    if (folder / SUMMARY_JSON).exists():
        levels = pd.DataFrame(read_json(folder / SUMMARY_JSON).get("levels") or [])
    return RunData(folder, manifest, requests, levels)


def latest_run(kind: str, outputs_root: str | Path | None = None, *, status: str = "ok",
               where: dict[str, Any] | None = None) -> Path:
    """The newest run of ``kind`` that finished with ``status`` (and matches ``where`` params)."""
    for path in reversed(list_runs(outputs_root, kind=kind)):
        manifest = read_json(path / MANIFEST)
        if status and manifest.get("status") != status:
            continue
        params = manifest.get("params") or {}
        if where and any(params.get(k) != v for k, v in where.items()):
            continue
        return path
    hint = f" with {where}" if where else ""
    raise SpeclabError(f"No finished {kind} run{hint} under the outputs folder; run {kind} first.")


# --------------------------------------------------------------------------- the server a run measured


class ModelCard(BaseModel):
    """One model a server serves, as its ``/v1/models`` says."""

    id: str
    root: str | None = None
    max_model_len: int | None = None


class ServerIdentity(BaseModel):
    """Everything speclab could learn about a server; ``None`` where it could not. Recorded in
    every manifest (``server``) and read back by the report as this record."""

    endpoint: str
    engine: str = "unknown"  # vllm | sglang | unknown
    version: str | None = None
    models: list[ModelCard] = Field(default_factory=list)
    metric_families: list[str] = Field(default_factory=list)
    spec_counters_present: bool = False
    spec_positions: int | None = None
    speculative_config: dict[str, Any] | None = None
    observed_method: str | None = None  # baseline | ngram | suffix | eagle3 | ... | speculative
    dtype: str | None = None
    server_info_available: bool = False
    sglang_server_info: dict[str, Any] | None = None
    pid: int | None = None
    cmdline: list[str] | None = None
    launch_command: str | None = None
    load_time_s: float | None = None
    managed: bool = False  # launched by speclab (True) or external (False)
    probed_utc: str = Field(default_factory=utc_now)
    notes: list[str] = Field(default_factory=list)
    contradictions: list[str] = Field(default_factory=list)  # where it contradicts the declared option

    @property
    def model_id(self) -> str | None:
        return self.models[0].id if self.models else None

    def summary_rows(self) -> list[tuple[str, str]]:
        """(field, value) pairs for a table in a notebook or report."""
        k = self.speculative_config.get("num_speculative_tokens") if self.speculative_config else None
        rows = [
            ("endpoint", self.endpoint),
            ("engine", f"{self.engine} {self.version or ''}".strip()),
            ("model", self.model_id or "?"),
            ("max_model_len", str(self.models[0].max_model_len if self.models else "?")),
            ("dtype", self.dtype or "?"),
            ("speculation", self.observed_method or "?"),
            ("k (config / position labels)", f"{k or '-'} / {self.spec_positions or '-'}"),
            ("launched by speclab", "yes" if self.managed else "no (external)"),
            ("load time", f"{self.load_time_s:.1f} s" if self.load_time_s else "-"),
            ("launch", self.launch_command or "-"),
        ]
        return rows


# --------------------------------------------------------------------------- the verify-cost probe's records


@dataclass
class ProbePoint:
    """One probed step: ``batch`` sequences extended by ``tokens`` each, over cached prefixes
    (a line of ``probe.jsonl``; :mod:`speclab.measure.probe` measures it)."""

    batch: int
    tokens: int
    repeat: int
    step_s: float | None
    timing: str  # prefill_time histogram | client latency
    client_s: float
    context_tokens_mean: float
    computed_tokens: float | None
    expected_tokens: int
    ok: bool
    refused: str | None = None
    # engine steps in the window that computed more than one token (vLLM's iteration-tokens
    # histogram; the pacer's own steps compute one): 1 when the B prompts shared one step
    steps_seen: int | None = None
    waited_s: float | None = None  # how long the probe waited for a quiet window before this point
    foreign_requests: float | None = None  # requests of others that finished during the point


@dataclass
class HeadPoint:
    """One pair of uncached prefills of ``rows + 1`` tokens: with logits at every position
    (``prompt_logprobs``) and plain (logits at the last position only); a line of ``probe-head.jsonl``."""

    rows: int
    repeat: int
    logits_s: float | None
    plain_s: float | None
    ok: bool
    refused: str | None = None

    @property
    def extra_s(self) -> float | None:
        """What the ``rows`` extra rows of logits cost (None for a refused pair)."""
        if not self.ok or self.logits_s is None or self.plain_s is None:
            return None
        return self.logits_s - self.plain_s


PointT = TypeVar("PointT")


def append_point(path: Path, point: ProbePoint | HeadPoint) -> None:
    """Append one point (or head pair) to ``probe.jsonl`` (``probe-head.jsonl``) as it is
    measured (a crash keeps what was probed)."""
    with open(path, "a") as handle:
        handle.write(json.dumps(asdict(point)) + "\n")


class Points(list[PointT]):
    """The points read from a file, and how many of its lines could not be read (torn or
    malformed: a reader says so rather than dropping them quietly)."""

    def __init__(self, items: Iterable[PointT] | None = None, malformed: int = 0) -> None:
        super().__init__(items or [])
        self.malformed = malformed


@overload
def read_points(path: Path) -> Points[ProbePoint]: ...


@overload
def read_points(path: Path, kind: type[PointT]) -> Points[PointT]: ...


def read_points(path: Path, kind: type[Any] = ProbePoint) -> Points[Any]:
    """The points of a ``probe.jsonl`` (``kind`` HeadPoint: the pairs of a ``probe-head.jsonl``);
    an absent file gives none. Lines that are not a point are counted in ``.malformed``."""
    points: Points[Any] = Points()
    if not path.exists():
        return points
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            points.append(kind(**json.loads(line)))
        except (ValueError, TypeError):
            points.malformed += 1
    return points
