"""Profiler traces analysed (speclab.profiling.analysis): engine steps, buckets, self time, scaling
with tokens per step, ranks, and comm/compute overlap (recorded and synthetic traces, see
tests/unit/profiling/helpers.py)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import orjson
import pytest

from speclab.profiling import analyse_profile, parse_step_annotation
from speclab.profiling.analysis import self_times
from tests.unit.profiling.helpers import gpu_trace, overlap_trace, write_trace, x

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
