"""Production request logs, read in batches: one normalised record per served completion.

Accepted shapes (one JSON object per JSONL line, or one Parquet row; ``format="auto"``
decides per row from its keys):

* ``chat``: ``messages`` (OpenAI chat messages) or ``prompt`` (text), plus ``completion``
  (text) or ``output_token_ids`` (ids); optional ``prompt_token_ids``.
* ``openai``: ``{"request": {...chat.completions body...}, "response": {...chat.completion...}}``:
  the prompt is ``request.messages``, the completion ``response.choices[0].message`` (its
  ``reasoning``/``reasoning_content`` first: those tokens were generated too), the time
  ``response.created`` unless the row has its own ``timestamp``.
* ``sharegpt``: ``conversations`` of ``{"from": human|gpt|system, "value": ...}``: every
  ``gpt`` turn is one request whose prompt is the conversation before it.

Optional columns on any shape: ``timestamp`` (epoch seconds or ISO 8601), ``duration_s`` or
``end_timestamp`` (how long the request was in the server), ``tenant``, ``category``,
``finish_reason``, ``id``/``request_id``.

Logs are never loaded whole: JSONL is read line by line (a gzip file too), Parquet through
``pyarrow.parquet.ParquetFile.iter_batches``; rows are normalised one by one so a bad row is
counted with its reason and position (:class:`BadRow`) instead of failing the batch or being
dropped silently. JSONL is not read with ``pyarrow.json`` because it infers one schema per
block and rejects the whole block on one malformed line.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import orjson

from speclab.errors import SpeclabError

__all__ = ["BadRow", "LogBatch", "LogFormat", "LogRecord", "iter_log_batches", "normalise_row"]

LogFormat = Literal["auto", "chat", "openai", "sharegpt"]
UNKNOWN = "unknown"


@dataclass
class LogRecord:
    """One served completion: the prompt (messages or text or ids) and what the model emitted."""

    request_id: str
    messages: list[dict[str, str]] | None = None
    prompt: str | None = None
    prompt_token_ids: np.ndarray | None = None  # int64
    completion: str | None = None
    output_token_ids: np.ndarray | None = None  # int64
    timestamp_s: float | None = None
    duration_s: float | None = None
    tenant: str = UNKNOWN
    category: str = UNKNOWN
    finish_reason: str | None = None


@dataclass(frozen=True)
class BadRow:
    """A row that could not be used: where it is and why."""

    row: int  # 0-based row (JSONL line) number in the file
    reason: str
    excerpt: str


@dataclass
class LogBatch:
    """Consecutive rows of the log: ``index`` counts batches from 0, ``first_row`` is the
    first row's number; ``records`` are the usable ones, ``bad`` the rest."""

    index: int
    first_row: int
    rows: int
    records: list[LogRecord] = field(default_factory=list)
    bad: list[BadRow] = field(default_factory=list)


class _Bad(ValueError):
    """A row-level problem (becomes a BadRow, never an exception to the caller)."""


# --------------------------------------------------------------------------- field helpers


def _text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a content list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type", "text") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    raise _Bad(f"message content is a {type(content).__name__}, not text")


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise _Bad("messages must be a non-empty list")
    out = []
    for m in value:
        if not isinstance(m, dict) or "role" not in m:
            raise _Bad("every message needs a role")
        out.append({"role": str(m["role"]), "content": _text(m.get("content"))})
    return out


def _ids(value: Any, name: str) -> np.ndarray | None:
    """Token ids as an int64 array; the check runs in numpy (a Python loop over every id
    took most of an ids-only replay's time)."""
    if value is None:
        return None
    if not isinstance(value, (list, np.ndarray)):
        raise _Bad(f"{name} must be a list of integers")
    if len(value) == 0:
        return np.empty(0, np.int64)
    try:
        ids = np.asarray(value)
    except ValueError:  # ragged nesting
        raise _Bad(f"{name} must be a list of integers") from None
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise _Bad(f"{name} must be a list of integers")
    return ids.astype(np.int64, copy=False)


def _timestamp(value: Any) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise _Bad("timestamp must be epoch seconds or ISO 8601")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dt.datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
        return stamp.timestamp()
    if isinstance(value, str):
        try:
            stamp = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise _Bad(f"timestamp {value[:40]!r} is not ISO 8601") from None
        stamp = stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.timezone.utc)
        return stamp.timestamp()
    raise _Bad("timestamp must be epoch seconds or ISO 8601")


def _label(value: Any) -> str:
    return UNKNOWN if value is None or value == "" else str(value)


def _common(row: dict[str, Any], record: LogRecord) -> LogRecord:
    """The optional columns shared by every shape."""
    if row.get("timestamp") is not None:
        record.timestamp_s = _timestamp(row.get("timestamp"))
    if row.get("duration_s") is not None:
        record.duration_s = float(row["duration_s"])
    elif row.get("end_timestamp") is not None and record.timestamp_s is not None:
        record.duration_s = _timestamp(row["end_timestamp"]) - record.timestamp_s  # type: ignore[operator]
    if record.duration_s is not None and record.duration_s < 0:
        raise _Bad("the request ends before it starts (duration < 0)")
    record.tenant = _label(row.get("tenant"))
    record.category = _label(row.get("category"))
    if row.get("finish_reason") is not None:
        record.finish_reason = str(row["finish_reason"])
    return record


# --------------------------------------------------------------------------- shapes


def _chat(row: dict[str, Any], request_id: str) -> list[LogRecord]:
    record = LogRecord(request_id=request_id)
    if row.get("messages") is not None:
        record.messages = _messages(row["messages"])
    elif isinstance(row.get("prompt"), str):
        record.prompt = row["prompt"]
    record.prompt_token_ids = _ids(row.get("prompt_token_ids"), "prompt_token_ids")
    if record.messages is None and record.prompt is None and record.prompt_token_ids is None:
        raise _Bad("no prompt: give messages, prompt or prompt_token_ids")
    record.output_token_ids = _ids(row.get("output_token_ids", row.get("completion_token_ids")), "output_token_ids")
    completion = row.get("completion")
    if completion is not None and not isinstance(completion, str):
        raise _Bad("completion must be text")
    record.completion = completion
    if record.completion is None and record.output_token_ids is None:
        raise _Bad("no completion: give completion text or output_token_ids")
    return [_common(row, record)]


def _openai(row: dict[str, Any], request_id: str) -> list[LogRecord]:
    request, response = row.get("request"), row.get("response")
    if not isinstance(request, dict) or not isinstance(response, dict):
        raise _Bad("openai rows need request and response objects")
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _Bad("response.choices is empty")
    choice = choices[0]
    message = choice.get("message") or {}
    reasoning = message.get("reasoning") or message.get("reasoning_content") or ""
    content = _text(message.get("content"))
    if not (reasoning or content):
        raise _Bad("the response's message has no content")
    record = LogRecord(
        request_id=str(response.get("id") or request_id), messages=_messages(request.get("messages")),
        completion=f"{reasoning}{content}", finish_reason=choice.get("finish_reason"),
        timestamp_s=_timestamp(response.get("created")),
    )
    return [_common(row, record)]


def _sharegpt(row: dict[str, Any], request_id: str) -> list[LogRecord]:
    turns = row.get("conversations")
    if not isinstance(turns, list) or not turns:
        raise _Bad("conversations must be a non-empty list")
    roles = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
             "chatgpt": "assistant", "system": "system", "bing": "assistant", "bard": "assistant"}
    history: list[dict[str, str]] = []
    records: list[LogRecord] = []
    for turn in turns:
        if not isinstance(turn, dict) or turn.get("from") not in roles:
            raise _Bad("every turn needs 'from' (human, gpt or system) and 'value'")
        role, text = roles[turn["from"]], _text(turn.get("value"))
        if role == "assistant" and any(m["role"] == "user" for m in history):
            record = LogRecord(request_id=f"{request_id}#{len(records)}", messages=list(history), completion=text)
            records.append(_common(row, record))
        history.append({"role": role, "content": text})
    if not records:
        raise _Bad("no assistant turn after a user turn")
    return records


_SHAPES = {"chat": _chat, "openai": _openai, "sharegpt": _sharegpt}


def _detect(row: dict[str, Any]) -> str:
    if "conversations" in row:
        return "sharegpt"
    if "request" in row and "response" in row:
        return "openai"
    return "chat"


def normalise_row(row: Any, row_number: int, fmt: LogFormat = "auto") -> list[LogRecord]:
    """The records one log row holds (a ShareGPT row may hold several); raises ``ValueError``
    with the reason when the row cannot be used."""
    if not isinstance(row, dict):
        raise _Bad("the row is not a JSON object")
    shape = _detect(row) if fmt == "auto" else fmt
    request_id = str(row.get("request_id") or row.get("id") or f"row{row_number}")
    try:
        return _SHAPES[shape](row, request_id)
    except _Bad:
        raise
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise _Bad(f"{type(exc).__name__}: {exc}") from None


# --------------------------------------------------------------------------- streaming


def _excerpt(raw: Any) -> str:
    text = raw if isinstance(raw, str) else repr(raw)
    return text[:160]


def _jsonl_rows(path: Path) -> Iterator[tuple[Any, str | None]]:
    """(parsed row, None) or (raw line, parse error) per line; blank lines count as bad rows."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as raw:
        for line in io.BufferedReader(raw):
            text = line.strip()
            try:
                yield orjson.loads(text), None
            except orjson.JSONDecodeError as exc:
                yield text.decode("utf-8", "replace"), f"not JSON ({str(exc).split(':')[0]})"


def _parquet_rows(path: Path, batch_size: int) -> Iterator[tuple[Any, str | None]]:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for unreadable files
        raise SpeclabError(f"{path} is not a readable Parquet file ({exc}); check the path and format.") from None
    for batch in parquet.iter_batches(batch_size=batch_size):
        for row in batch.to_pylist():
            yield row, None


def log_kind(path: str | Path) -> str:
    """``parquet`` or ``jsonl`` from the file name (``.parquet``/``.pq``; anything else is JSONL)."""
    return "parquet" if Path(path).suffix in (".parquet", ".pq") else "jsonl"


def iter_log_batches(path: str | Path, batch_size: int = 2000, fmt: LogFormat = "auto",
                     max_rows: int | None = None) -> Iterator[LogBatch]:
    """The log in batches of ``batch_size`` rows (the last may be shorter), in file order.

    Batch boundaries depend only on the file and ``batch_size``, so a resumed replay finds
    the same batches again. ``max_rows`` stops early (a sample).
    """
    path = Path(path)
    if not path.exists():
        raise SpeclabError(f"The log {path} does not exist; pass the path of a JSONL or Parquet file.")
    if batch_size < 1:
        raise SpeclabError(f"batch_size must be at least 1; got {batch_size}.")
    rows = _parquet_rows(path, batch_size) if log_kind(path) == "parquet" else _jsonl_rows(path)
    batch = LogBatch(index=0, first_row=0, rows=0)
    number = 0
    for number, (row, error) in enumerate(rows):
        if max_rows is not None and number >= max_rows:
            number -= 1
            break
        batch.rows += 1
        if error is not None:
            batch.bad.append(BadRow(number, error, _excerpt(row)))
        else:
            try:
                batch.records.extend(normalise_row(row, number, fmt))
            except ValueError as exc:
                batch.bad.append(BadRow(number, str(exc), _excerpt(orjson.dumps(row, default=str).decode())))
        if batch.rows == batch_size:
            yield batch
            batch = LogBatch(index=batch.index + 1, first_row=number + 1, rows=0)
    if batch.rows:
        yield batch
