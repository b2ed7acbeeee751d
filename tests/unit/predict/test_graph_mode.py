"""Full against piecewise CUDA-graph capture (benchmarks/gpu_step.py --graph-mode), as shipped
from an H200, and the cost of piecewise mode read from it."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from speclab.errors import SpeclabError
from speclab.predict.stepparts import (
    load_gpu_step,
    load_graph_mode,
    piecewise_cost_ms,
    shipped_gpu_step,
    shipped_graph_mode,
)

ROOT = Path(__file__).resolve().parents[3]
SHAPES = ("dense-8b", "moe-30b-a3b", "kimi-k2.5-tp8-rank")


def _point(shape: str, batch: int, n: int, context: int) -> dict[str, float]:
    frame = load_graph_mode(shape)
    row = frame[(frame["batch"] == batch) & (frame["n"] == n) & (frame["context"] == context)]
    assert len(row) == 1
    return {k: float(v) for k, v in row.iloc[0].items() if isinstance(v, int | float | np.floating | np.integer)}


def test_the_shipped_files_record_the_h200_and_the_grid() -> None:
    assert [p.name for p in shipped_graph_mode()] == [f"h200-graph-mode-{s}.json" for s in sorted(SHAPES)]
    assert not any("graph-mode" in p.name for p in shipped_gpu_step())  # the part-by-part loader is untouched
    frame = load_graph_mode()
    assert set(frame["shape"]) == set(SHAPES)
    for shape in SHAPES:
        machine = frame.attrs["machine"][shape]
        assert machine["gpu_name"] == "NVIDIA H200"
        assert machine["driver"] and machine["torch"] and machine["triton"] and machine["date_utc"]
        config = frame.attrs["config"][shape]
        assert config["cuda_graphs"] is True and config["modes"] == ["full", "piecewise"]
        layers = config["shape"]["layers"]
        assert config["piecewise_graphs"] == layers + 1 and config["eager_attention_ops"] == layers
        pts = frame[frame["shape"] == shape]
        assert set(pts["batch"]) == {1, 4, 16, 32, 64, 128} and set(pts["context"]) == {1024, 4096}
        assert {1, 2, 4, 8} <= set(pts["n"])
    # Kimi's grid stopped at its time budget: n = 7 was not reached
    assert 7 not in set(frame.loc[frame["shape"] == "kimi-k2.5-tp8-rank", "n"])
    assert load_graph_mode().attrs["config"]["kimi-k2.5-tp8-rank"]["stopped_early"] is True


def test_piecewise_is_slower_than_full_at_batch_one_for_each_shape() -> None:
    frame = load_graph_mode()
    ones = frame[frame["batch"] == 1]
    assert len(ones) == 2 * (8 + 8 + 7)
    assert (ones["piecewise_ms"] > ones["full_ms"]).all()
    assert (ones["extra_ms"] > 0.25).all()
    # decode at batch 1, 1024 tokens of context: about a third of a ms to one ms a step
    assert _point("dense-8b", 1, 1, 1024)["extra_ms"] == pytest.approx(0.331, abs=1e-3)
    assert _point("moe-30b-a3b", 1, 1, 1024)["extra_ms"] == pytest.approx(0.436, abs=1e-3)
    assert _point("kimi-k2.5-tp8-rank", 1, 1, 1024)["extra_ms"] == pytest.approx(0.956, abs=1e-3)
    assert _point("dense-8b", 1, 1, 1024)["full_ms"] == pytest.approx(6.099, abs=1e-3)


def test_where_python_cannot_keep_up_the_extra_jumps() -> None:
    frame = load_graph_mode()
    bound = frame[frame["piecewise_launch_ms"] > frame["full_ms"]]
    assert set(bound["shape"]) == {"dense-8b"} and len(bound) == 6
    assert bound["extra_ms"].min() > 0.65 and bound["extra_pct"].min() > 10
    dense = frame[(frame["shape"] == "dense-8b") & (frame["piecewise_launch_ms"] <= frame["full_ms"])]
    assert bound["extra_ms"].median() > 1.5 * dense["extra_ms"].median()


def test_piecewise_computes_the_same_stack() -> None:
    frame = load_graph_mode()
    dense = frame[frame["shape"] == "dense-8b"]
    assert (dense["piecewise_logits_rel_error"] == 0).all() and (dense["full_repeat_logits_rel_error"] == 0).all()
    for shape in ("moe-30b-a3b", "kimi-k2.5-tp8-rank"):  # MoE steps differ run to run by themselves
        pts = frame[frame["shape"] == shape]
        assert pts["piecewise_logits_rel_error"].max() <= 1.5 * pts["full_repeat_logits_rel_error"].max()


def test_cost_at_a_measured_point_is_its_spread() -> None:
    p = _point("moe-30b-a3b", 16, 4, 4096)
    assert piecewise_cost_ms("moe-30b-a3b", 16, 4, 4096) == pytest.approx((p["extra_ms_p10"], p["extra_ms_p90"]))
    low, high = piecewise_cost_ms("moe-30b-a3b", 16, 4, 4096)
    assert low <= p["extra_ms"] <= high
    # no context: the wider of the two measured contexts
    q = _point("moe-30b-a3b", 16, 4, 1024)
    assert piecewise_cost_ms("moe-30b-a3b", 16, 4) == pytest.approx(
        (min(p["extra_ms_p10"], q["extra_ms_p10"]), max(p["extra_ms_p90"], q["extra_ms_p90"])))


def test_cost_interpolates_between_measured_points() -> None:
    # batch 2 lies halfway between 1 and 4 in log batch
    a, b = _point("dense-8b", 1, 1, 1024), _point("dense-8b", 4, 1, 1024)
    low, high = piecewise_cost_ms("dense-8b", 2, 1, 1024)
    assert low == pytest.approx((a["extra_ms_p10"] + b["extra_ms_p10"]) / 2)
    assert high == pytest.approx((a["extra_ms_p90"] + b["extra_ms_p90"]) / 2)
    assert min(a["extra_ms_p10"], b["extra_ms_p10"]) <= low <= max(a["extra_ms_p10"], b["extra_ms_p10"])
    # Kimi was not measured at n = 7: halfway between n = 6 and n = 8
    six, eight = _point("kimi-k2.5-tp8-rank", 4, 6, 1024), _point("kimi-k2.5-tp8-rank", 4, 8, 1024)
    assert piecewise_cost_ms("kimi-k2.5-tp8-rank", 4, 7, 1024) == pytest.approx(
        ((six["extra_ms_p10"] + eight["extra_ms_p10"]) / 2, (six["extra_ms_p90"] + eight["extra_ms_p90"]) / 2))
    # context: linear between 1024 and 4096
    lo1, hi1 = piecewise_cost_ms("kimi-k2.5-tp8-rank", 1, 1, 1024)
    lo4, hi4 = piecewise_cost_ms("kimi-k2.5-tp8-rank", 1, 1, 4096)
    mid = piecewise_cost_ms("kimi-k2.5-tp8-rank", 1, 1, 2560)
    assert mid == pytest.approx(((lo1 + lo4) / 2, (hi1 + hi4) / 2))
    # clamped past the grid (batch 128, n 8, contexts 1024-4096)
    assert piecewise_cost_ms("dense-8b", 512, 1, 1024) == piecewise_cost_ms("dense-8b", 128, 1, 1024)
    assert piecewise_cost_ms("dense-8b", 1, 12, 8192) == piecewise_cost_ms("dense-8b", 1, 8, 4096)


def test_the_cost_is_positive_at_batch_one_and_larger_for_the_bigger_stack() -> None:
    for shape in SHAPES:
        for n in (1, 2, 4, 8):
            low, high = piecewise_cost_ms(shape, 1, n)
            assert 0 < low <= high
    assert piecewise_cost_ms("kimi-k2.5-tp8-rank", 1, 1)[0] > piecewise_cost_ms("dense-8b", 1, 1)[1]


def test_no_cuda_graphs_no_cost(tmp_path: Path) -> None:
    assert piecewise_cost_ms("kimi-k2.5-tp8-rank", 1, 1, device="cpu") == (0.0, 0.0)
    body = json.loads(shipped_graph_mode()[0].read_text())
    body["cuda_graphs"] = False
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(body))
    frame = load_graph_mode(paths=[path])
    assert piecewise_cost_ms(body["shape"]["name"], 1, 1, frame=frame) == (0.0, 0.0)


def test_refusals(tmp_path: Path) -> None:
    with pytest.raises(SpeclabError, match="shapes measured"):
        load_graph_mode("llama-405b")
    with pytest.raises(SpeclabError, match="shapes measured"):
        piecewise_cost_ms("llama-405b", 1, 1)
    with pytest.raises(SpeclabError, match="part-by-part"):
        load_graph_mode(paths=shipped_gpu_step()[:1])
    with pytest.raises(SpeclabError, match="does not exist"):
        load_graph_mode(paths=[tmp_path / "nope.json"])
    with pytest.raises(SpeclabError, match="batch > 0"):
        piecewise_cost_ms("dense-8b", 0, 1)


@pytest.mark.usefixtures("vllm_lock")  # a benchmark: one at a time on the shared CPU
def test_graph_mode_runs_on_this_cpu_without_graphs(tmp_path: Path) -> None:
    from speclab.paths import server_python

    python = server_python()
    if not python.exists():
        pytest.skip("no server venv with torch (make setup)")
    done = subprocess.run([str(python), str(ROOT / "benchmarks/gpu_step.py"), "--device", "cpu", "--tiny",
                           "--shapes", "moe-30b-a3b", "--graph-mode", "full,piecewise", "--batches", "1,2",
                           "--ns", "1,3", "--contexts", "32", "--reps", "2", "--out-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    files = sorted(tmp_path.glob("gpu-graph-mode-*.json"))
    frame = load_graph_mode(paths=files)
    name = "moe-30b-a3b/tiny"
    config = frame.attrs["config"][name]
    assert config["cuda_graphs"] is False and "piecewise equals eager" in config["note"]
    assert set(zip(frame["batch"], frame["n"], strict=True)) == {(1, 1), (2, 1), (1, 3), (2, 3)}
    assert (frame["piecewise_logits_rel_error"] == 0).all()  # the same kernels, eagerly, in the same order
    assert piecewise_cost_ms(name, 1, 1, frame=frame) == (0.0, 0.0)
    assert not math.isnan(float(frame["extra_ms"].iloc[0]))
    # the part-by-part loader still reads what the same script writes without --graph-mode
    assert load_gpu_step(shipped_gpu_step()).attrs["machine"]["dense-8b"]["gpu_name"] == "NVIDIA H200"
