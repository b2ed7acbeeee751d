"""A seeded synthetic production log: no real user data, but the properties that decide
whether speculation pays.

* **Length distributions**: prompt and completion lengths are log-normal per category
  (request lengths in served traffic are heavy-tailed; the medians here are small so a
  100k-request log stays a few hundred MB).
* **Repetition per category**: a completion is written span by span; with the category's
  ``copy_prob`` a span copies words from the prompt or from the completion so far (code
  edits and extraction copy a lot, open chat little), else it draws fresh Zipf-distributed
  words. This is what prompt-lookup (n-gram) and suffix decoding feed on.
* **Diurnal arrivals**: request times follow a day curve ``1 + amplitude * cos(2 pi (h -
  peak_hour) / 24)`` (thinning of a Poisson process); each request's ``duration_s`` comes
  from its lengths at a nominal prefill and decode speed, so concurrency can be rebuilt.
* **Tenants** with their own category mix and system prompt.

Rows are ``chat`` shaped (``messages``, ``completion``; ``--ids`` writes ``prompt_token_ids``
and ``output_token_ids`` over a synthetic vocabulary instead, for replay-only benchmarks)
or ``openai`` shaped; see :mod:`speclab.traffic.logs`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import orjson

from speclab.errors import SpeclabError

__all__ = ["CATEGORIES", "TENANTS", "CategoryShape", "generate_rows", "write_log"]


@dataclass(frozen=True)
class CategoryShape:
    """How one category's requests look: median lengths (words), spread, repetition."""

    prompt_words: float
    output_words: float
    sigma: float  # log-normal spread of both lengths
    copy_prob: float  # chance a span is copied (prompt or earlier output)
    span_words: float  # mean span length


CATEGORIES: dict[str, CategoryShape] = {
    "code-edit": CategoryShape(prompt_words=220, output_words=160, sigma=0.6, copy_prob=0.75, span_words=10),
    "extraction": CategoryShape(prompt_words=180, output_words=70, sigma=0.5, copy_prob=0.6, span_words=6),
    "rag-qa": CategoryShape(prompt_words=260, output_words=80, sigma=0.5, copy_prob=0.4, span_words=7),
    "summarise": CategoryShape(prompt_words=300, output_words=90, sigma=0.5, copy_prob=0.25, span_words=5),
    "chat": CategoryShape(prompt_words=40, output_words=140, sigma=0.8, copy_prob=0.08, span_words=4),
}

# tenant -> (share of requests, category mix)
TENANTS: dict[str, tuple[float, dict[str, float]]] = {
    "ide-assistant": (0.35, {"code-edit": 0.8, "chat": 0.2}),
    "docs-search": (0.30, {"rag-qa": 0.6, "summarise": 0.3, "extraction": 0.1}),
    "back-office": (0.15, {"extraction": 0.7, "summarise": 0.3}),
    "consumer-chat": (0.20, {"chat": 0.9, "summarise": 0.1}),
}

_SYLLABLES = ["ka", "lo", "mi", "ren", "ta", "su", "vo", "ne", "dri", "pal", "xo", "qui", "ba", "tor", "el", "fu"]


def _vocabulary(rng: np.random.Generator, size: int) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        n = int(rng.integers(1, 5))  # 16 + 256 + 4096 + 65536 possible words
        words.add("".join(_SYLLABLES[i] for i in rng.integers(0, len(_SYLLABLES), n)))
    return sorted(words)


def _arrival_times(rng: np.random.Generator, n: int, days: float, peak_hour: float, amplitude: float) -> np.ndarray:
    """Seconds from the start, sorted, with a diurnal rate (thinning)."""
    span = days * 86400.0
    out = np.empty(0)
    while out.size < n:
        t = rng.uniform(0.0, span, 2 * n)
        rate = 1.0 + amplitude * np.cos(2 * np.pi * ((t / 3600.0) % 24 - peak_hour) / 24.0)
        keep = rng.uniform(0.0, 1.0 + amplitude, t.size) < rate
        out = np.concatenate([out, t[keep]])
    return np.sort(out[:n])


def _spans(rng: np.random.Generator, shape: CategoryShape, prompt: np.ndarray, length: int,
           vocab_size: int) -> np.ndarray:
    """A completion of ``length`` words: copied spans (prompt or own earlier words) and fresh ones."""
    n = length  # never more spans than words; random draws made up front (vectorised)
    lengths = rng.geometric(1.0 / shape.span_words, n)
    copied = rng.random(n) < shape.copy_prob
    from_self = rng.random(n) >= 0.7
    where = rng.random(n)
    fresh = (rng.zipf(1.1, int(lengths.sum())) - 1) % vocab_size
    parts: list[np.ndarray] = []
    made, used = 0, 0
    for i in range(n):
        if made >= length:
            break
        span = int(lengths[i])
        if copied[i]:
            source = np.concatenate(parts) if (from_self[i] and parts) else prompt
            start = int(where[i] * max(len(source) - 1, 1))
            piece = source[start:start + span]
        else:
            piece = fresh[used:used + span]
            used += span
        parts.append(piece)
        made += len(piece)
    return np.concatenate(parts)[:length] if parts else fresh[:length]


def generate_rows(requests: int, seed: int = 0, days: float = 1.0, peak_hour: float = 15.0,
                  amplitude: float = 0.7, shape: Literal["chat", "openai"] = "chat", ids: bool = False,
                  start: str = "2026-01-05T00:00:00+00:00", vocab_size: int = 5000) -> Iterator[dict[str, Any]]:
    """``requests`` log rows in time order; the same seed gives the same rows."""
    if requests < 1:
        raise SpeclabError(f"Generate at least one request; got {requests}.")
    rng = np.random.default_rng(seed)
    vocab = np.array(_vocabulary(rng, vocab_size), dtype=object)
    t0 = dt.datetime.fromisoformat(start).timestamp()
    tenants = list(TENANTS)
    tenant_p = np.array([TENANTS[t][0] for t in tenants])
    systems = {t: rng.integers(0, vocab_size, int(rng.integers(8, 30))) for t in tenants}
    # tenant and category draws up front: one rng.choice per request is the slow part
    tenant_of = rng.choice(len(tenants), size=requests, p=tenant_p)
    pick = rng.random(requests)
    times = _arrival_times(rng, requests, days, peak_hour, amplitude)
    for i, at in enumerate(times):
        tenant = tenants[int(tenant_of[i])]
        mix = TENANTS[tenant][1]
        category = list(mix)[min(int(np.searchsorted(np.cumsum(list(mix.values())), pick[i])), len(mix) - 1)]
        cat = CATEGORIES[category]
        n_prompt = max(3, int(rng.lognormal(np.log(cat.prompt_words), cat.sigma)))
        n_output = max(2, int(rng.lognormal(np.log(cat.output_words), cat.sigma)))
        prompt = (rng.zipf(1.1, n_prompt) - 1) % vocab_size
        output = _spans(rng, cat, prompt, n_output, vocab_size)
        # nominal server time: prefill at 5k tokens/s, decode at 30 tokens/s per sequence
        duration = 0.05 + 1.3 * n_prompt / 5000.0 + 1.3 * n_output / 30.0
        row: dict[str, Any] = {"request_id": f"req-{seed}-{i:07d}", "timestamp": round(t0 + float(at), 3),
                               "duration_s": round(duration, 3), "tenant": tenant, "category": category}
        if ids:
            row.update(prompt_token_ids=np.concatenate([systems[tenant], prompt]).tolist(),
                       output_token_ids=output.tolist(), finish_reason="stop")
        else:
            system = " ".join(vocab[systems[tenant]].tolist())
            user = " ".join(vocab[prompt].tolist())
            text = " ".join(vocab[output].tolist())
            messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
            if shape == "openai":
                row = {"request": {"model": "served", "messages": messages, "temperature": 0},
                       "response": {"id": row["request_id"], "created": int(row["timestamp"]),
                                    "choices": [{"index": 0, "finish_reason": "stop",
                                                 "message": {"role": "assistant", "content": text}}]},
                       **{k: row[k] for k in ("timestamp", "duration_s", "tenant", "category")}}
            else:
                row.update(messages=messages, completion=text, finish_reason="stop")
        yield row


def write_log(path: str | Path, requests: int, seed: int = 0, **kwargs: Any) -> Path:
    """Write :func:`generate_rows` to ``path``: JSONL (``.jsonl``, ``.jsonl.gz``) or Parquet
    (``.parquet``, written in row groups of 10k so it streams back in batches)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = generate_rows(requests, seed, **kwargs)
    if path.suffix in (".parquet", ".pq"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        writer = None
        chunk: list[dict[str, Any]] = []
        for row in rows:
            chunk.append(row)
            if len(chunk) == 10_000:
                table = pa.Table.from_pylist(chunk, schema=writer.schema if writer else None)
                writer = writer or pq.ParquetWriter(path, table.schema)
                writer.write_table(table)
                chunk = []
        if chunk:
            table = pa.Table.from_pylist(chunk, schema=writer.schema if writer else None)
            writer = writer or pq.ParquetWriter(path, table.schema)
            writer.write_table(table)
        if writer is not None:
            writer.close()
        return path
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as out:
        for row in rows:
            out.write(orjson.dumps(row) + b"\n")
    return path
