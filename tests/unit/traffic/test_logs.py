"""Production request logs read in batches (speclab.traffic.logs): chat, OpenAI and ShareGPT rows,
bad rows counted, JSONL, gzip and parquet alike."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from speclab.errors import SpeclabError
from speclab.traffic.gen import write_log
from speclab.traffic.logs import iter_log_batches


def _write_jsonl(path: Path, rows: list) -> Path:
    with open(path, "wb") as out:
        for row in rows:
            out.write(row if isinstance(row, bytes) else orjson.dumps(row))
            out.write(b"\n")
    return path


def test_readers_take_chat_openai_and_sharegpt_and_count_bad_rows(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "messages": [{"role": "user", "content": "hi"}], "completion": "hello", "tenant": "t1",
         "category": "chat", "timestamp": "2026-01-05T10:00:00Z", "duration_s": 2.5},
        {"request": {"messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}]},
         "response": {"id": "cmpl-1", "created": 1767607200, "choices": [
             {"finish_reason": "stop", "message": {"content": "answer", "reasoning_content": "think "}}]}},
        {"id": "c", "conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "u1"},
                                      {"from": "gpt", "value": "a1"}, {"from": "human", "value": "u2"},
                                      {"from": "gpt", "value": "a2"}]},
        b"{not json",
        {"messages": [{"role": "user", "content": "no completion"}]},
        {"prompt_token_ids": [1, 2], "output_token_ids": [3, "x"]},
        {"prompt_token_ids": [1, 2], "output_token_ids": [3, 4.5]},
        {"id": "g", "prompt": "text prompt", "output_token_ids": [5, 6], "timestamp": 100, "end_timestamp": 99},
    ]
    log = _write_jsonl(tmp_path / "log.jsonl", rows)
    batches = list(iter_log_batches(log, batch_size=4))
    assert [b.rows for b in batches] == [4, 4]
    assert [b.first_row for b in batches] == [0, 4]
    records = [r for b in batches for r in b.records]
    assert [r.request_id for r in records] == ["a", "cmpl-1", "c#0", "c#1"]
    chat, openai, first, second = records
    assert chat.timestamp_s == 1767607200.0 and chat.duration_s == 2.5 and chat.tenant == "t1"
    assert openai.completion == "think answer" and openai.timestamp_s == 1767607200.0
    assert openai.messages == [{"role": "user", "content": "q"}] and openai.finish_reason == "stop"
    assert [m["content"] for m in second.messages] == ["s", "u1", "a1", "u2"] and second.completion == "a2"
    assert first.completion == "a1" and len(first.messages) == 2
    bad = [b for batch in batches for b in batch.bad]
    assert [b.row for b in bad] == [3, 4, 5, 6, 7]
    assert "not JSON" in bad[0].reason and "completion" in bad[1].reason
    assert "integers" in bad[2].reason and "integers" in bad[3].reason and "duration" in bad[4].reason


def test_parquet_and_gzip_logs_stream_the_same_records(tmp_path: Path) -> None:
    jsonl = write_log(tmp_path / "log.jsonl", 120, seed=4)
    gz = write_log(tmp_path / "log.jsonl.gz", 120, seed=4)
    parquet = write_log(tmp_path / "log.parquet", 120, seed=4)
    with gzip.open(gz) as unzipped:
        assert unzipped.read() == jsonl.read_bytes()
    a = [r for b in iter_log_batches(jsonl, 50) for r in b.records]
    b = [r for b in iter_log_batches(parquet, 50) for r in b.records]
    assert len(a) == 120 and a == b
    assert [len(x.records) for x in iter_log_batches(parquet, 50)] == [50, 50, 20]
    assert len([r for x in iter_log_batches(jsonl, 50, max_rows=70) for r in x.records]) == 70


def test_missing_log_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(SpeclabError, match="does not exist"):
        next(iter_log_batches(tmp_path / "nope.jsonl"))
