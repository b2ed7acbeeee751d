"""Profiler traces read (speclab.profiling.trace): the streaming parse against a whole load, gzip,
awkward layouts, truncation, the vLLM frontend's trace left out, trimming, the ijson backend and
rank files read in parallel."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pytest

from speclab.errors import SpeclabError
from speclab.profiling import analyse_profile, read_trace, trim_trace
from speclab.profiling.trace import find_trace_files, iter_event_batches
from tests.unit.profiling.helpers import GPU_DIR, gpu_trace, overlap_trace, write_trace, x


def test_stream_parse_matches_a_whole_load_for_every_chunk_size() -> None:
    whole = orjson.loads(gzip.decompress(gpu_trace().read_bytes()))
    expected = len(whole["traceEvents"])
    for chunk in (1024, 65536, 8 << 20):
        meta: dict[str, Any] = {}
        batches = list(iter_event_batches(gpu_trace(), meta, chunk_bytes=chunk))
        flat = [e for b in batches for e in b]
        assert len(flat) == expected
        assert flat[::997] == whole["traceEvents"][::997]
        assert meta["distributedInfo"]["rank"] == 0 and meta["traceName"] == whole["traceName"]
        assert "traceEvents" not in meta


def test_gzip_and_plain_read_the_same(tmp_path: Path) -> None:
    plain = tmp_path / "rank0.plain.pt.trace.json"
    plain.write_bytes(gzip.decompress(gpu_trace().read_bytes()))
    a, b = read_trace(gpu_trace()), read_trace(plain)
    pd.testing.assert_frame_equal(a.ops, b.ops)
    assert a.names == b.names and a.meta == b.meta
    assert a.bytes_read == b.bytes_read == plain.stat().st_size


@pytest.mark.parametrize("pretty", [False, True])
def test_awkward_json_layouts(tmp_path: Path, pretty: bool) -> None:
    # braces and "},{" inside strings, arrays of objects inside args, unicode, a bare array
    tricky = [
        x("cpu_op", 'weird }, { name "quoted" \\ ünïcode', 0, 5, extra=[{"a": 1}, {"b": [{"c": 2}]}]),
        x("cpu_op", "aten::mm", 1, 2),
        x("user_annotation", "execute_context_1(7)_generation_0(0)", 0, 10),
    ]
    events = tricky * 200
    path = write_trace(tmp_path / "rank0.t.pt.trace.json", events, pretty=pretty)
    batches = list(iter_event_batches(path, chunk_bytes=512))
    assert sum(len(b) for b in batches) == len(events)
    assert batches[0][0]["name"].startswith("weird }, {")
    bare = tmp_path / "bare.trace.json"
    bare.write_bytes(orjson.dumps(events))
    assert sum(len(b) for b in iter_event_batches(bare, chunk_bytes=300)) == len(events)


def test_truncated_trace_is_one_clear_error(tmp_path: Path) -> None:
    raw = gzip.decompress(gpu_trace().read_bytes())
    cut = tmp_path / "rank0.cut.pt.trace.json"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(SpeclabError, match="truncated"):
        read_trace(cut)
    junk = tmp_path / "junk.trace.json"
    junk.write_bytes(b'{"hello": 1}')
    with pytest.raises(SpeclabError, match="traceEvents"):
        read_trace(junk)


def test_vllm_frontend_trace_is_left_out(tmp_path: Path) -> None:
    shutil.copy(gpu_trace(), tmp_path / "rank0.1.pt.trace.json.gz")
    write_trace(tmp_path / "vm_11097.async_llm.1.pt.trace.json.gz", [])
    assert [p.name for p in find_trace_files(tmp_path)] == ["rank0.1.pt.trace.json.gz"]
    assert len(find_trace_files(tmp_path, include_frontend=True)) == 2


def test_trim_keeps_a_window(tmp_path: Path) -> None:
    steps = analyse_profile(GPU_DIR).steps
    first = steps.iloc[1]
    out = tmp_path / "rank0.trim.pt.trace.json.gz"
    counts = trim_trace(gpu_trace(), out, start_us=first["start_us"], end_us=first["start_us"] + first["wall_us"])
    assert 0 < counts["events_out"] < counts["events_in"]
    trimmed = analyse_profile(out)
    assert len(trimmed.steps) == 1 and trimmed.steps["tokens"].item() == first["tokens"]


def test_ijson_backend_agrees(gpu_report) -> None:
    pytest.importorskip("ijson")
    other = analyse_profile(GPU_DIR, {"backend": "ijson"})
    pd.testing.assert_frame_equal(other.breakdown, gpu_report.breakdown)


def test_parallel_rank_reading(tmp_path: Path) -> None:
    for rank in (0, 1):
        overlap_trace(tmp_path / f"rank{rank}.x.pt.trace.json", rank=rank)
    report = analyse_profile(tmp_path, {"workers": 2})
    assert report.traces["rank"].tolist() == [0, 1]
    assert report.overlap["overlap_us"].tolist() == [30.0, 30.0]
