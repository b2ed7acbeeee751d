"""Profiler traces: streaming parse, engine steps, buckets, scaling and overlap.

Real fixtures (tests/data/traces/README.md): an H200 trace of a small Qwen2-MoE decoding
under torch.profiler with vLLM-named steps, and a CPU trace of the embedded vLLM with
n-gram speculation. Synthetic traces cover layouts and overlap arithmetic.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd
import pytest

from speclab.errors import SpeclabError
from speclab.profiling import (
    DEFAULT_BUCKETS,
    ProfileParams,
    analyse_profile,
    parse_step_annotation,
    plot_bucket_scaling,
    plot_step_breakdown,
    read_trace,
    trim_trace,
)
from speclab.profiling.analysis import self_times
from speclab.profiling.trace import find_trace_files, iter_event_batches

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
GPU_DIR = TRACES / "h200-qwen2moe"
CPU_DIR = TRACES / "vllm-cpu-ngram"


def gpu_trace() -> Path:
    return next(GPU_DIR.glob("*.pt.trace.json.gz"))


def cpu_trace() -> Path:
    return next(CPU_DIR.glob("*.pt.trace.json.gz"))


@pytest.fixture(scope="module")
def gpu_report():
    return analyse_profile(GPU_DIR)


@pytest.fixture(scope="module")
def cpu_report():
    return analyse_profile(CPU_DIR)


def write_trace(path: Path, events: list[dict[str, Any]], meta: dict[str, Any] | None = None,
                *, pretty: bool = False) -> Path:
    document = {**(meta or {"schemaVersion": 1}), "traceEvents": events, "traceName": str(path)}
    data = orjson.dumps(document, option=orjson.OPT_INDENT_2 if pretty else 0)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wb") as handle:
            handle.write(data)
    else:
        path.write_bytes(data)
    return path


def x(cat: str, name: str, ts: float, dur: float, pid: Any = 1, tid: Any = 1, **args: Any) -> dict[str, Any]:
    event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def overlap_trace(path: Path, rank: int = 0) -> Path:
    """Two decode steps; compute on stream 7, NCCL on stream 20, known overlaps."""
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        x("user_annotation", "execute_context_0(0)_generation_2(2)", 0, 100),
        x("user_annotation", "execute_context_0(0)_generation_2(6)", 200, 100),
        x("cuda_runtime", "cudaLaunchKernel", 10, 2, correlation=1),
        x("cuda_runtime", "cudaLaunchKernel", 20, 2, correlation=2),
        x("cuda_runtime", "cudaLaunchKernel", 30, 2, correlation=3),
        x("cuda_runtime", "cudaLaunchKernel", 210, 2, correlation=4),
        x("cuda_runtime", "cudaLaunchKernel", 220, 2, correlation=5),
        # step 0: gemm [50, 90), attention [90, 110), all-reduce [80, 120): 30 us overlapped
        x("kernel", "nvjet_sm90_tst_64x8_TNT", 50, 40, pid=0, tid=7, stream=7, correlation=1),
        x("kernel", "flash_fwd_kernel", 90, 20, pid=0, tid=7, stream=7, correlation=2),
        x("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 80, 40, pid=0, tid=20, stream=20,
          correlation=3),
        # step 1: launched in step 1, the all-reduce runs alone: fully exposed
        x("kernel", "nvjet_sm90_tst_64x8_TNT", 230, 30, pid=0, tid=7, stream=7, correlation=4),
        x("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 270, 10, pid=0, tid=20, stream=20,
          correlation=5),
        {"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 10, "cat": "ac2g", "name": "ac2g"},
    ]
    return write_trace(path, events, {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": 2}})


# --------------------------------------------------------------------------- reading


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


# --------------------------------------------------------------------------- steps


def test_step_annotations_simple_and_detailed() -> None:
    decode = parse_step_annotation("execute_context_0(0)_generation_4(16)")
    assert decode is not None and decode.kind == "decode" and decode.tokens == 16 and decode.gen_reqs == 4
    prefill = parse_step_annotation("execute_context_2(300)_generation_0(0)")
    assert prefill is not None and prefill.kind == "prefill" and prefill.tokens == 300
    mixed = parse_step_annotation(
        "execute_68_context_1(sq64sk64sqsq4096sqsk4096)_generation_4(sq4sk400sqsq4sqsk400)")
    assert mixed is not None and mixed.kind == "mixed" and mixed.ctx_tokens == 64 and mixed.gen_tokens == 4
    assert parse_step_annotation("execute_context_0(0)_generation_0(0)").kind == "idle"  # type: ignore[union-attr]
    assert parse_step_annotation("gpu_model_runner: sample") is None


def test_gpu_fixture_steps(gpu_report) -> None:
    steps = gpu_report.steps
    assert len(steps) == 17 and (steps["source"] == "kernel").all()
    assert steps["step_kind"].value_counts().to_dict() == {"decode": 15, "prefill": 1, "mixed": 1}
    decode = steps[steps["step_kind"] == "decode"]
    # plain decode (1 token per request) and verify steps of k+1 = 2, 4, 8 tokens
    assert sorted(decode["tokens_per_request"].unique()) == [1.0, 2.0, 4.0, 8.0]
    assert steps.loc[steps["step_kind"] == "prefill", "tokens"].item() == 384
    assert steps.loc[steps["step_kind"] == "mixed", "tokens"].item() == 68
    assert (steps["busy_us"] > 0).all() and (steps["busy_us"] <= steps["wall_us"]).all()
    # sampling runs after the annotation (as in vLLM): the step window still owns it
    assert gpu_report.traces["outside_steps_us"].item() < 0.01 * gpu_report.traces["op_time_us"].item()


def test_cpu_fixture_steps_and_self_time(cpu_report) -> None:
    steps = cpu_report.steps
    assert (steps["source"] == "cpu_op").all()
    assert set(steps["step_kind"]) == {"prefill", "decode", "mixed"}
    decode = steps[steps["step_kind"] == "decode"]
    assert decode["tokens"].nunique() >= 3  # n-gram: steps verify varying numbers of tokens
    # self times partition busy time: never more than the step's wall time
    assert (steps["busy_us"] <= steps["wall_us"] * 1.0001).all()


# --------------------------------------------------------------------------- buckets


def test_gpu_buckets_and_totals(gpu_report) -> None:
    names = gpu_report.names
    by_bucket = names.groupby("bucket")["time_us"].sum()
    for bucket in ("moe_gemm", "attention", "dense_gemm", "sampling", "norms_elementwise", "memory"):
        assert by_bucket[bucket] > 0, bucket
    grouped = names.loc[names["name"].str.contains("GroupProblemShape"), "bucket"]
    assert set(grouped) == {"moe_gemm"}
    assert set(names.loc[names["name"].str.startswith("nvjet"), "bucket"]) == {"dense_gemm"}
    assert set(names.loc[names["name"].str.contains("sdpa"), "bucket"]) == {"attention"}
    # the breakdown over steps plus what lies outside them is every kernel's time
    total = gpu_report.breakdown["time_us"].sum() + gpu_report.traces["outside_steps_us"].sum()
    assert total == pytest.approx(names["time_us"].sum(), rel=1e-9)
    shares = gpu_report.breakdown.groupby("step")["share"].sum()
    assert np.allclose(shares, 1.0)


def test_unmatched_names_are_listed(gpu_report) -> None:
    unmatched = gpu_report.unmatched()
    assert len(unmatched) > 0 and (unmatched["bucket"] == "other").all()
    assert unmatched["time_us"].is_monotonic_decreasing
    assert unmatched["name"].str.contains("DeviceScan").any()
    summary = gpu_report.summary
    other = summary[(summary["bucket"] == "other") & (summary["step_kind"] == "decode")]
    assert other["time_us"].item() == pytest.approx(
        gpu_report.breakdown.query("bucket == 'other' and step_kind == 'decode'")["time_us"].sum())


def test_cpu_buckets_match_the_recipe(cpu_report) -> None:
    summary = cpu_report.summary.set_index(["step_kind", "bucket"])
    # docs/embedded-server.md: oneDNN GEMMs dominate SmolLM2 decode on this CPU
    assert summary.loc[("decode", "dense_gemm"), "share"] > 0.4
    names = cpu_report.names.set_index("name")
    assert names.loc["_C::onednn_mm", "bucket"] == "dense_gemm"
    assert names.loc["_C::cpu_attn_reshape_and_cache", "bucket"] == "cache_writes"
    assert names.loc["_C::cpu_attention_with_kv_cache", "bucket"] == "attention"
    assert names.loc["_C::greedy_argmax", "bucket"] == "sampling"


def test_rules_are_overridable_and_validated(tmp_path: Path) -> None:
    report = analyse_profile(GPU_DIR, {"buckets": [{"name": "gemms", "pattern": "nvjet|gemm", "ignore_case": True}],
                                       "other_bucket": "rest"})
    assert set(report.breakdown["bucket"].astype(str)) == {"gemms", "rest"}
    assert set(report.names.loc[report.names["name"].str.startswith("nvjet"), "bucket"]) == {"gemms"}
    with pytest.raises(SpeclabError, match="buckets.0.pattern"):
        analyse_profile(GPU_DIR, {"buckets": [{"name": "bad", "pattern": "("}]})
    with pytest.raises(SpeclabError, match="other_bucket"):
        analyse_profile(GPU_DIR, {"other_bucket": "attention"})
    assert ProfileParams().buckets[0].name == DEFAULT_BUCKETS[0].name


def test_self_times_of_nested_ops() -> None:
    # parent [0,10) holds child [1,4) (holding [2,3)) and child [5,9); a second thread apart
    ts = np.array([0.0, 1.0, 2.0, 5.0, 0.0])
    dur = np.array([10.0, 3.0, 1.0, 4.0, 6.0])
    thread = np.array([1, 1, 1, 1, 2])
    assert self_times(ts, dur, thread).tolist() == [3.0, 2.0, 1.0, 4.0, 6.0]


# --------------------------------------------------------------------------- tables


def test_scaling_table(gpu_report) -> None:
    scaling = gpu_report.scaling.set_index("bucket")
    assert {"(all buckets)", "(step wall)", "moe_gemm"} <= set(scaling.index)
    moe = scaling.loc["moe_gemm"]
    assert moe["steps"] == 15 and moe["tokens_min"] == 4 and moe["tokens_max"] == 32
    assert moe["slope_us_per_token"] > 0 and moe["scales_with_tokens"]
    assert not scaling.loc["communication", "scales_with_tokens"]


def test_multiple_ranks(tmp_path: Path) -> None:
    document = orjson.loads(gzip.decompress(gpu_trace().read_bytes()))
    for rank in (0, 1):
        document["distributedInfo"]["rank"] = rank
        with gzip.open(tmp_path / f"dp0_pp0_tp{rank}_dcp0_ep0_rank{rank}.1.pt.trace.json.gz", "wb") as handle:
            handle.write(orjson.dumps(document))
    report = analyse_profile(tmp_path)
    assert report.traces["rank"].tolist() == [0, 1]
    per_rank = report.steps.groupby("rank").size()
    assert per_rank.tolist() == [17, 17]
    a, b = (report.breakdown[report.breakdown["rank"] == r]["time_us"].to_numpy() for r in (0, 1))
    assert np.allclose(a, b)
    assert set(report.summary["rank"]) == {0, 1} and set(report.scaling["rank"]) == {0, 1}


def test_clashing_ranks_are_kept_apart(tmp_path: Path) -> None:
    overlap_trace(tmp_path / "a.pt.trace.json", rank=0)
    overlap_trace(tmp_path / "b.pt.trace.json", rank=0)
    report = analyse_profile(tmp_path)
    assert len(set(report.traces["rank"])) == 2
    assert "appears twice" in " ".join(report.traces["notes"])


def test_overlap_and_launch_attribution(tmp_path: Path) -> None:
    report = analyse_profile(overlap_trace(tmp_path / "rank0.x.pt.trace.json"))
    overlap = report.overlap.iloc[0]
    assert overlap["comm_us"] == pytest.approx(50.0)
    assert overlap["compute_us"] == pytest.approx(90.0)
    assert overlap["overlap_us"] == pytest.approx(30.0)
    assert overlap["exposed_comm_us"] == pytest.approx(20.0)
    by_step = report.overlap_by_step.set_index("step")
    assert by_step.loc[0, "overlap_us"] == pytest.approx(30.0)
    assert by_step.loc[1, "overlap_us"] == pytest.approx(0.0) and by_step.loc[1, "exposed_comm_us"] == 10.0
    step0 = report.breakdown[report.breakdown["step"] == 0].set_index("bucket")["time_us"]
    assert step0["communication"] == 40 and step0["dense_gemm"] == 40 and step0["attention"] == 20
    assert report.steps["gen_tokens"].tolist() == [2, 6]


def test_cpu_traces_have_no_overlap_table(cpu_report) -> None:
    assert cpu_report.overlap.empty


def test_report_saves_and_plots(gpu_report, tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    written = gpu_report.save(tmp_path)
    assert pd.read_parquet(written["breakdown"]).shape == gpu_report.breakdown.shape
    fig = plot_step_breakdown(gpu_report, kinds=["decode"])
    assert fig.axes[0].get_ylabel() == "time (ms)"
    fig = plot_bucket_scaling(gpu_report)
    assert fig.axes[0].get_xlabel() == "tokens per step"
    shares = gpu_report.decode_shares()
    assert shares[0].sum() == pytest.approx(1.0) and shares.index[0] == "norms_elementwise"


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


def test_whole_trace_summary_without_step_annotations(tmp_path: Path) -> None:
    # an SGLang-like trace: kernels, no vLLM step ranges
    events = [
        x("cuda_runtime", "cudaLaunchKernel", 1, 1, correlation=1),
        x("kernel", "fused_moe_kernel", 10, 30, pid=0, tid=7, stream=7, correlation=1),
        x("kernel", "mystery_kernel", 50, 10, pid=0, tid=7, stream=7),
    ]
    report = analyse_profile(write_trace(tmp_path / "1-TP-3.trace.json.gz", events))
    assert report.traces["rank"].tolist() == [3] and report.traces["steps"].item() == 0
    assert "no engine-step annotations" in report.traces["notes"].item()
    whole = report.summary[report.summary["step_kind"] == "(whole trace)"].set_index("bucket")
    assert whole.loc["moe_gemm", "share"] == pytest.approx(0.75)
    assert whole.loc["other", "time_us"] == 10 and np.isnan(whole.loc["other", "time_per_step_us"])
    assert report.unmatched()["name"].tolist() == ["mystery_kernel"]


def test_whole_trace_rows_sum_to_every_op(gpu_report) -> None:
    whole = gpu_report.summary[gpu_report.summary["step_kind"] == "(whole trace)"]
    assert whole["time_us"].sum() == pytest.approx(gpu_report.names["time_us"].sum())
    assert whole["steps"].unique().tolist() == [17]


def test_parallel_rank_reading(tmp_path: Path) -> None:
    for rank in (0, 1):
        overlap_trace(tmp_path / f"rank{rank}.x.pt.trace.json", rank=rank)
    report = analyse_profile(tmp_path, {"workers": 2})
    assert report.traces["rank"].tolist() == [0, 1]
    assert report.overlap["overlap_us"].tolist() == [30.0, 30.0]
