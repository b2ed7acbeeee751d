"""Replay n-gram and suffix proposers over a production log, in batches, on Ray or in-process.

One batch (consecutive log rows, :func:`speclab.traffic.logs.iter_log_batches`) is the unit
of work: tokenised with the served model's tokenizer (:class:`ChatTokenizer`), replayed for
every option, turned into one row per request x option with vLLM's counters
(:func:`replay_batch`). The same function runs in this process (``workers=None``) or as a
Ray task (``workers=N`` starts a local Ray bound to 127.0.0.1 with N CPUs; ``ray_address``
joins a running cluster), so the two paths give identical rows by construction, and a test
checks it.

Resumable: every finished batch is written to ``<run>/batches/batch-NNNNNN.parquet`` (+
``.json`` with its bad rows and timings) as soon as it completes; a rerun into the same run
folder skips them (batch boundaries depend only on the file and the batch size, and the
settings are pinned in ``replay_settings.json``).

**Suffix decoding at scale.** The real proposer is ArcticInference's C++
``SuffixDecodingCache``, installed only in the server venv (it pins torch and vLLM's numpy;
installing it next to the workbook would break one of the two). Each batch therefore runs
``scripts/suffix_replay.py`` as a subprocess with the server venv's python (the same script
the baseline replay uses), from inside the Ray task; Ray workers themselves stay on the
workbook's python. The alternative, Ray workers started with the server venv's interpreter
(``runtime_env`` ``py_executable``), would need Ray installed into the server venv, which
this project never modifies. On a cluster every node needs that python at the same path
(``suffix_python``). The server-wide response tree of suffix decoding then sees the earlier
requests of the same batch only (up to ``batch_size - 1``; vLLM keeps up to
``suffix_decoding_max_cached_requests``, 10000 by default), in log order, ``suffix_concurrency``
at a time: use large batches for suffix.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

from speclab.errors import SpeclabError
from speclab.predict.ngram_fast import COUNTER_COLUMNS, pack_requests, replay_ngram_batch
from speclab.predict.replay import (
    DEFAULT_MAX_MODEL_LEN,
    NGRAM_DEFAULT_LOOKUP,
    SUFFIX_DEFAULTS,
    ReplayStep,
    summarise_steps,
)
from speclab.traffic.logs import BadRow, LogBatch, LogFormat, iter_log_batches, log_kind
from speclab.traffic.tokens import ChatTokenizer

__all__ = ["LogReplay", "ReplayOption", "read_log_replay", "replay_batch", "replay_log"]

BATCH_DIR = "batches"
SETTINGS_JSON = "replay_settings.json"
_SUFFIX_SCRIPT = Path(__file__).parents[1] / "scripts" / "suffix_replay.py"
_ID_COLUMNS = ["request_id", "row", "tenant", "category", "timestamp_s", "duration_s", "prompt_tokens",
               "output_tokens"]


class ReplayOption(BaseModel):
    """A model-free speculative option to replay: n-gram (vLLM's prompt lookup) or suffix."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["ngram", "suffix"]
    k: int = Field(..., ge=1, le=64, description="num_speculative_tokens")
    prompt_lookup_min: int | None = Field(None, ge=1, description="ngram only")
    prompt_lookup_max: int | None = Field(None, ge=1, description="ngram only")

    @model_validator(mode="after")
    def _bounds(self) -> ReplayOption:
        lo, hi = self.lookup()
        if self.method == "ngram" and lo > hi:
            raise ValueError(f"prompt_lookup_min {lo} exceeds prompt_lookup_max {hi}")
        return self

    def lookup(self) -> tuple[int, int]:
        """(min_n, max_n) as vLLM resolves them (one side missing takes the other; none: 5)."""
        lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
        if lo is None and hi is None:
            return NGRAM_DEFAULT_LOOKUP, NGRAM_DEFAULT_LOOKUP
        return (lo if lo is not None else hi), (hi if hi is not None else lo)  # type: ignore[return-value]

    @property
    def label(self) -> str:
        """Same spelling as a SpecOption's label: ``ngram k=4 (2..4)``, ``suffix k=8``."""
        if self.method == "ngram" and (self.prompt_lookup_min or self.prompt_lookup_max):
            return f"ngram k={self.k} ({self.prompt_lookup_min or '-'}..{self.prompt_lookup_max or '-'})"
        return f"{self.method} k={self.k}"


# --------------------------------------------------------------------------- one batch


def _suffix_counters(prompts: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]], option: ReplayOption,
                     max_model_len: int, python: str | None, concurrency: int) -> tuple[np.ndarray, str]:
    """Suffix counters per request from scripts/suffix_replay.py (real arctic-inference where
    ``python`` can import it), and the implementation's name."""
    settings: dict[str, Any] = {**SUFFIX_DEFAULTS, "k": option.k, "max_model_len": max_model_len,
                                "implementation": "auto" if python else "speclab"}
    payload = {"settings": settings, "requests": [
        {"request_id": str(i), "level": 0, "concurrency": concurrency, "prompt": list(map(int, p)),
         "output": list(map(int, o))} for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))]}
    interpreter = python if python and Path(python).exists() else sys.executable
    done = subprocess.run([interpreter, str(_SUFFIX_SCRIPT)], input=json.dumps(payload), capture_output=True,
                          text=True, timeout=3600)
    if done.returncode != 0:
        raise SpeclabError("The suffix replay subprocess failed; its output ends with:", detail=done.stderr[-3000:])
    answer = json.loads(done.stdout)
    out = np.zeros((len(prompts), len(COUNTER_COLUMNS) + option.k), np.int64)
    for key, raw in answer["steps"].items():
        row = summarise_steps((ReplayStep(*s) for s in raw), option.k)
        out[int(key)] = [row[c] for c in COUNTER_COLUMNS] + [row[f"accepted_pos{i + 1}"] for i in range(option.k)]
    return out, str(answer["implementation"])


@dataclass
class BatchResult:
    """One replayed batch: rows per request x option, bad rows, timings."""

    index: int
    rows: int
    frame: pd.DataFrame
    bad: list[BadRow]
    stats: dict[str, Any]


def replay_batch(batch: LogBatch, tokenizer_state: Any, options: Sequence[ReplayOption],
                 max_model_len: int = DEFAULT_MAX_MODEL_LEN, suffix_python: str | None = None,
                 suffix_concurrency: int = 1) -> BatchResult:
    """Tokenise one batch and replay every option over it (also the body of a Ray task).

    ``tokenizer_state``: :meth:`ChatTokenizer.state` (None when every record carries ids).
    Rows: one per usable record x option, ``_ID_COLUMNS`` then the option's label, method,
    k and vLLM's counters (``accepted_pos1..K`` up to the largest k, 0 past an option's k).
    """
    started = time.perf_counter()
    records = batch.records
    need_tokenizer = any(r.output_token_ids is None or r.prompt_token_ids is None for r in records)
    if need_tokenizer and tokenizer_state is None:
        raise SpeclabError("The log holds text; pass the served model's folder (--model) to tokenise it.")
    if need_tokenizer:
        tokens = ChatTokenizer.from_state(tokenizer_state).tokenize(records)
        prompts, outputs = tokens.prompts, tokens.outputs
    else:
        prompts = [r.prompt_token_ids for r in records]
        outputs = [r.output_token_ids for r in records]
    tokenized = time.perf_counter()
    ids = pd.DataFrame({
        "request_id": [r.request_id for r in records], "row": np.arange(len(records)) + batch.first_row,
        "tenant": [r.tenant for r in records], "category": [r.category for r in records],
        "timestamp_s": [r.timestamp_s for r in records], "duration_s": [r.duration_s for r in records],
        "prompt_tokens": [len(p) for p in prompts], "output_tokens": [len(o) for o in outputs],
    })
    ids["timestamp_s"] = ids["timestamp_s"].astype(float)
    ids["duration_s"] = ids["duration_s"].astype(float)
    k_max = max(o.k for o in options)
    frames, seconds, impl, fallbacks = [], {}, {}, 0
    packed = pack_requests(prompts, outputs)
    for option in options:
        t0 = time.perf_counter()
        if option.method == "ngram":
            lo, hi = option.lookup()
            counts, fell_back = replay_ngram_batch(*packed, lo, hi, option.k, max_model_len)
            fallbacks += fell_back
            impl[option.label] = "speclab ngram_fast (vLLM 0.32 NgramProposer semantics)"
        else:
            counts, impl[option.label] = _suffix_counters(prompts, outputs, option, max_model_len, suffix_python,
                                                          suffix_concurrency)
        seconds[option.label] = time.perf_counter() - t0
        cols = list(COUNTER_COLUMNS) + [f"accepted_pos{i + 1}" for i in range(option.k)]
        frame = pd.DataFrame(counts, columns=cols)
        for i in range(option.k, k_max):
            frame[f"accepted_pos{i + 1}"] = 0
        frame.insert(0, "option", option.label)
        frame.insert(1, "method", option.method)
        frame.insert(2, "k", option.k)
        frames.append(pd.concat([ids, frame], axis=1))
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    positions = int(sum(max(len(o) - 1, 0) for o in outputs))
    stats = {"records": len(records), "bad_rows": len(batch.bad), "prompt_tokens": int(sum(map(len, prompts))),
             "output_tokens": int(sum(map(len, outputs))), "positions": positions,
             "tokenize_s": tokenized - started, "replay_s": seconds, "implementation": impl,
             "hash_fallback_steps": fallbacks, "pid": os.getpid()}
    return BatchResult(batch.index, batch.rows, out, batch.bad, stats)


# --------------------------------------------------------------------------- the run folder


def _batch_path(run_dir: Path, index: int, suffix: str) -> Path:
    return run_dir / BATCH_DIR / f"batch-{index:06d}.{suffix}"


def _write_batch(run_dir: Path, result: BatchResult) -> None:
    parquet = _batch_path(run_dir, result.index, "parquet")
    parquet.parent.mkdir(parents=True, exist_ok=True)
    result.frame.to_parquet(parquet.with_suffix(".tmp"), index=False)
    meta = {"index": result.index, "rows": result.rows, "stats": result.stats,
            "bad_rows": [b.__dict__ for b in result.bad]}
    _batch_path(run_dir, result.index, "json").write_text(json.dumps(meta))
    parquet.with_suffix(".tmp").replace(parquet)  # the parquet file last: its presence means done


def _settings(log: Path, options: Sequence[ReplayOption], batch_size: int, fmt: str, max_model_len: int,
              tokenizer: ChatTokenizer | None, max_rows: int | None, suffix_concurrency: int) -> dict[str, Any]:
    stat = log.stat()
    tok_hash = hashlib.sha256(tokenizer.state()[0].encode()).hexdigest()[:16] if tokenizer else None
    return {"log": str(log.resolve()), "log_bytes": stat.st_size, "batch_size": batch_size, "format": fmt,
            "max_model_len": max_model_len, "options": [o.model_dump() for o in options],
            "tokenizer_sha256": tok_hash, "max_rows": max_rows, "suffix_concurrency": suffix_concurrency}


def _pin_settings(run_dir: Path, settings: dict[str, Any]) -> None:
    path = run_dir / SETTINGS_JSON
    if path.exists():
        previous = json.loads(path.read_text())
        if previous != settings:
            changed = sorted(k for k in settings if previous.get(k) != settings[k])
            raise SpeclabError(f"{run_dir} was replayed with other settings ({', '.join(changed)}); "
                               "resume with the same ones or use a new run folder.")
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings, indent=2))


@dataclass
class LogReplay:
    """A replayed log: one row per request x option (``requests``), the bad rows seen, and
    throughput figures (``stats``)."""

    run_dir: Path
    requests: pd.DataFrame
    rows: int
    bad_rows: int
    bad_examples: list[dict[str, Any]]
    stats: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def read_log_replay(run_dir: str | Path, examples: int = 5) -> LogReplay:
    """Everything the batches of ``run_dir`` hold, in log order."""
    run_dir = Path(run_dir)
    parquets = sorted((run_dir / BATCH_DIR).glob("batch-*.parquet"))
    if not parquets:
        raise SpeclabError(f"{run_dir} holds no replayed batches; run speclab replay-logs into it first.")
    frames: list[pd.DataFrame] = []
    shown: list[dict[str, Any]] = []
    impl: dict[str, str] = {}
    replay_s: dict[str, float] = {}
    rows = bad = 0
    stats: dict[str, Any] = {"records": 0, "prompt_tokens": 0, "output_tokens": 0, "positions": 0, "tokenize_s": 0.0,
             "replay_s": replay_s, "hash_fallback_steps": 0, "batches": len(parquets)}
    for parquet in parquets:
        frames.append(pd.read_parquet(parquet))
        meta = json.loads(parquet.with_suffix(".json").read_text())
        rows += meta["rows"]
        bad += len(meta["bad_rows"])
        shown.extend(meta["bad_rows"][: max(examples - len(shown), 0)])
        for key in ("records", "prompt_tokens", "output_tokens", "positions", "hash_fallback_steps"):
            stats[key] += meta["stats"][key]
        stats["tokenize_s"] += meta["stats"]["tokenize_s"]
        for label, s in meta["stats"]["replay_s"].items():
            replay_s[label] = replay_s.get(label, 0.0) + s
        impl.update(meta["stats"]["implementation"])
    stats["implementation"] = impl
    requests = pd.concat(frames, ignore_index=True)
    return LogReplay(run_dir, requests, rows, bad, shown, stats)


def _total_rows(log: Path) -> int | None:
    if log_kind(log) == "parquet":
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(log).metadata.num_rows)
    return None


def _start_ray(workers: int | None, address: str | None) -> Any:
    """Join ``address`` or start a local Ray with ``workers`` CPUs, bound to 127.0.0.1."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if not address:
        # Ray turns "127.0.0.1" into the machine's reachable address unless cluster mode is
        # off (ray/_private/services.py get_node_ip_address): off, it stays on loopback.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray

    if ray.is_initialized():
        return ray
    if address:
        import speclab

        # the cluster's workers get this speclab as a package upload, not from their disks
        ray.init(address=address, runtime_env={"py_modules": [str(Path(speclab.__file__).parent)]},
                 log_to_driver=False)
    else:
        ray.init(num_cpus=workers, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
                 configure_logging=False)
    return ray


def replay_log(log: str | Path, run_dir: str | Path, options: Sequence[ReplayOption], *,
               tokenizer: ChatTokenizer | None = None, batch_size: int = 2000, fmt: LogFormat = "auto",
               max_model_len: int = DEFAULT_MAX_MODEL_LEN, workers: int | None = None,
               ray_address: str | None = None, suffix_python: str | None = None, suffix_concurrency: int = 1,
               max_rows: int | None = None, progress: bool = True, keep_ray: bool = False) -> LogReplay:
    """Replay ``options`` over the log into ``run_dir`` and read the result back.

    ``workers=None`` and no ``ray_address``: this process, batch after batch. ``workers=N``:
    a local Ray instance with N CPUs (127.0.0.1 only); ``ray_address``: a running Ray cluster
    (``ray://host:10001`` or ``host:6379``). Finished batches already in ``run_dir`` are
    skipped. ``keep_ray``: leave Ray running afterwards (the caller shuts it down).
    """
    if not options:
        raise SpeclabError("Give at least one option to replay (e.g. ngram k=4).")
    log, run_dir = Path(log), Path(run_dir)
    if not log.exists():
        raise SpeclabError(f"The log {log} does not exist; pass the path of a JSONL or Parquet file.")
    _pin_settings(run_dir, _settings(log, options, batch_size, fmt, max_model_len, tokenizer, max_rows,
                                     suffix_concurrency))
    from speclab.measure import progress as bars

    state = tokenizer.state() if tokenizer is not None else None
    args = (list(options), max_model_len, suffix_python, suffix_concurrency)
    bar = bars.bar(total=_total_rows(log) if max_rows is None else max_rows, unit="row", desc="replay",
                   show=progress)
    started, skipped = time.perf_counter(), 0
    use_ray = workers is not None or ray_address is not None
    batches = iter_log_batches(log, batch_size, fmt, max_rows)
    ray = None
    try:
        if not use_ray:
            for batch in batches:
                if _batch_path(run_dir, batch.index, "parquet").exists():
                    skipped += 1
                else:
                    _write_batch(run_dir, replay_batch(batch, state, *args))
                bar.update(batch.rows)
        else:
            ray = _start_ray(workers, ray_address)
            task = ray.remote(num_cpus=1)(replay_batch)
            state_ref = ray.put(state)
            limit = 2 * max(int(ray.cluster_resources().get("CPU", 1)), 1)
            pending: dict[Any, int] = {}

            def drain(until: int) -> None:
                while len(pending) > until:
                    done, _ = ray.wait(list(pending), num_returns=1)
                    rows = pending.pop(done[0])
                    _write_batch(run_dir, ray.get(done[0]))
                    bar.update(rows)

            for batch in batches:
                if _batch_path(run_dir, batch.index, "parquet").exists():
                    skipped += 1
                    bar.update(batch.rows)
                    continue
                pending[task.remote(batch, state_ref, *args)] = batch.rows
                drain(limit)
            drain(0)
    finally:
        bar.close()
        if ray is not None and not keep_ray:
            ray.shutdown()  # a local Ray stops; a cluster is only disconnected from
    wall = time.perf_counter() - started
    result = read_log_replay(run_dir)
    result.stats.update({"wall_s": wall, "skipped_batches": skipped, "workers": workers,
                         "ray_address": ray_address, "engine": "ray" if use_ray else "single process"})
    if result.stats["hash_fallback_steps"]:
        result.notes.append(f"{result.stats['hash_fallback_steps']} n-gram steps hit a hash collision and were "
                            "decided by the exact KMP fallback")
    if any("re-implementation" in impl for impl in result.stats["implementation"].values()):
        result.notes.append("suffix drafts came from speclab's pure-Python re-implementation (arctic-inference "
                            "not importable by the suffix python); tie-breaking may differ from the real cache")
    if any(o.method == "suffix" for o in options):
        result.notes.append(f"suffix: the server-wide response tree sees earlier requests of the same batch only "
                            f"(up to {batch_size - 1}), {suffix_concurrency} at a time")
    return result


def iter_options(ngram_k: Iterable[int], suffix_k: Iterable[int], lookup_min: int = 2,
                 lookup_max: int = 4) -> list[ReplayOption]:
    """n-gram options at each k (lookup bounds as the embedded default) and suffix at each k."""
    out = [ReplayOption(method="ngram", k=k, prompt_lookup_min=lookup_min, prompt_lookup_max=lookup_max)
           for k in ngram_k]
    return out + [ReplayOption(method="suffix", k=k) for k in suffix_k]
