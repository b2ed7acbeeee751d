"""The run-folder format: file names, the request record, the level schema, the sweep plan,
and the readers. Everything that writes or reads a run folder uses these names; this module
imports only the runs layer below it (folders, manifests, JSON) and the prompt vocabulary.

A sweep's folder holds ``manifest.json`` (written first, finalised last), ``requests.jsonl``
(one row per request, appended as it finishes), ``levels.jsonl`` (one object per level as it
ends), ``summary.json`` (``{"levels": [...]}`` with every key of :data:`LEVEL_KEYS`),
``requests.parquet`` (the same rows, tidy), ``plan.json`` + ``prompts.jsonl`` (which prompt ran
where, so another arm repeats it exactly). See outputs/README.md and docs/architecture.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import orjson
import pandas as pd

from speclab.errors import SpeclabError
from speclab.prompts import Prompt, load_jsonl
from speclab.runs import MANIFEST, list_runs, read_json, write_json
from speclab.urls import strip_credentials_in_text

REQUESTS_JSONL = "requests.jsonl"
LEVELS_JSONL = "levels.jsonl"
PLAN_JSON = "plan.json"
PROMPTS_JSONL = "prompts.jsonl"
SUMMARY_JSON = "summary.json"
REQUESTS_PARQUET = "requests.parquet"

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
