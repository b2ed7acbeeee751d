"""The layer benchmark runs for real on this CPU (server venv torch) and reads back tidy."""

from __future__ import annotations

import pytest

from speclab.errors import SpeclabError
from speclab.moe.bench import LayerShape, bench_frame, load_bench, run_layer_bench, shipped_gpu_bench
from speclab.paths import server_python


@pytest.mark.usefixtures("vllm_lock")  # a benchmark: one at a time on the shared CPU
def test_tiny_layer_runs_on_cpu_and_records_the_machine(tmp_path) -> None:
    if not server_python().exists():
        pytest.skip("no server venv with torch (make setup)")
    shape = LayerShape(name="tiny", experts=32, top_k=4, hidden=64, ffn=32, dtype="float32")
    out = tmp_path / "bench.json"
    data = run_layer_bench([shape], [1, 4], repeats=1, samples=1, time_budget_s=20, out=out)
    assert out.exists() and data["machine"]["device"] == "cpu" and data["cuda_graphs"] is False
    frame = bench_frame(load_bench(out))
    assert len(frame) == 4 and set(frame["routing"]) == {"uniform", "zipf1.0"}
    one = frame[frame["tokens"] == 1]
    assert (one["distinct_experts"] == 4).all() and (one["multiplier_vs_1_token"] == 1).all()
    assert (frame[frame["tokens"] == 4]["distinct_experts"] > 4).all()
    assert (frame["step_ms"] > 0).all()


def test_shipped_gpu_bench_is_tidy() -> None:
    frame = bench_frame(load_bench(shipped_gpu_bench()))
    assert frame["cuda_graphs"].all() and (frame["dtype"] == "bfloat16").all()
    kimi = frame[frame["shape"] == "kimi-k2.5"]
    assert kimi["expert_mib"].iloc[0] == pytest.approx(3 * 7168 * 2048 * 2 / 2**20)
    assert kimi["weight_gb_per_s"].median() > 1000  # an H200 reads experts at TB/s
    with pytest.raises(SpeclabError, match="No MoE layer benchmark"):
        load_bench("/nonexistent/bench.json")
