"""A step in parts (speclab.predict.stepparts): the all-reduce form, the shipped GPU step curves and
fits to them, the speedup decomposition, and the same decomposition from a 00-profile run's tables."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from speclab.errors import SpeclabError
from speclab.predict.stepparts import (
    AllReduceForm,
    PartScaling,
    PartsStepTime,
    decompose_speedup,
    driving_part,
    fit_part_forms,
    fit_step_model_form,
    load_gpu_step,
    profile_parts_model,
    verify_vs_standin,
)

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def steps():
    return load_gpu_step()


def test_allreduce_is_flat_at_decode_sizes_and_bandwidth_bound_past_them() -> None:
    form = AllReduceForm()
    assert form.us(14_336) == pytest.approx(24.2, abs=0.3)  # one Kimi token (7168 x 2 bytes)
    assert form.us(64) == pytest.approx(24.6)  # flat below the first published size
    assert form.us(262_144) == pytest.approx(28.0)
    # past 256 KB: the ring moves 2 (g-1)/g of the extra bytes at the bus bandwidth
    extra = 2 * 7 / 8 * (1_048_576 - 262_144) / 22.2e9 * 1e6
    assert form.us(1_048_576) == pytest.approx(28.0 + extra)


def _synthetic_curves(tmp_path: Path) -> list[Path]:
    """gpu_step.py-shaped files whose parts follow known forms (MoE, GEMM knee at 128 tokens)."""
    rows = []
    for ctx in (1024, 4096):
        for b in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            for n in (1, 2, 4, 8):
                if b * n > 512 or (n > 1 and b > 64):
                    continue
                t = b * n
                d = 64 * (1 - (1 - 8 / 64) ** t)
                attn = 0.2 + 0.001 * b + 0.05 * b * ctx / 1e3 + 0.004 * b * (n - 1) * ctx / 1e3
                moe = 0.1 + 0.02 * d + 0.0005 * t
                gemm = 1.0 + 0.0002 * t + 0.01 * max(t - 128, 0)
                other = 0.3 + 0.001 * t
                rows.append({"batch": b, "n": n, "context": ctx, "kind": "verify" if n > 1 else "decode",
                             "tokens": t, "distinct_experts": d, "attention_ms": attn, "moe_ms": moe,
                             "dense_ms": gemm, "other_ms": other, "step_ms": attn + moe + gemm + other})
    body = {"machine": {"gpu_name": "synthetic", "date_utc": "2026-12-03"},
            "shape": {"name": "toy-moe", "experts": 64, "top_k": 8}, "weight_sets": 1, "points": rows}
    path = tmp_path / "gpu-step-toy-moe.json"
    path.write_text(json.dumps(body))
    return [path]


def test_fits_recover_known_part_forms_and_the_step_model_form_misses_the_knee(tmp_path: Path) -> None:
    frame = load_gpu_step(_synthetic_curves(tmp_path))
    assert frame.attrs["machine"]["toy-moe"]["gpu_name"] == "synthetic"
    forms = fit_part_forms(frame, "toy-moe")
    assert forms.knee == 128
    np.testing.assert_allclose(forms.attention, [0.2, 0.001, 0.05, 0.004], rtol=1e-6, atol=1e-9)
    assert forms.moe is not None
    np.testing.assert_allclose(forms.moe, [0.1, 0.02, 0.0005], rtol=1e-6, atol=1e-9)
    table = forms.fit_table()
    assert table["residual_pct"].abs().max() < 1e-6
    # The step model's form (a curve in sequences, context, draft tokens past a knee <= 8) has no
    # knee at hundreds of tokens: its residuals on the same points are large.
    _, step = fit_step_model_form(frame, "toy-moe")
    assert step["residual_pct"].abs().max() > 5


def test_verify_against_decode_and_the_stand_in(tmp_path: Path) -> None:
    table = verify_vs_standin(load_gpu_step(_synthetic_curves(tmp_path)))
    row = table[(table["batch"] == 16) & (table["n"] == 8) & (table["context"] == 4096)].set_index("part")
    # attention: 8 tokens re-read one cache (x1.x); the stand-in reads 8 caches (x~8)
    assert 1.0 < row.loc["attention", "verify_over_decode"] < 1.7
    assert row.loc["attention", "standin_over_decode"] > 6
    assert row.loc["step", "standin_ms"] > row.loc["step", "verify_ms"]


def test_load_gpu_step_refuses_bad_files(tmp_path: Path) -> None:
    with pytest.raises(SpeclabError, match="does not exist"):
        load_gpu_step([tmp_path / "nope.json"])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"points": []}))
    with pytest.raises(SpeclabError, match="no timed points"):
        load_gpu_step([bad])
    with pytest.raises(SpeclabError, match="6 needed"):
        fit_part_forms(load_gpu_step(_synthetic_curves(tmp_path)), "other-shape")


def _model(overhead: tuple[float, float] = (1.0, 3.0)) -> PartsStepTime:
    return PartsStepTime([
        PartScaling("communication", "borrowed", "flat", lambda b, n: 5.0),
        PartScaling("moe", "fitted", "grows with tokens", lambda b, n: 1.0 + 0.5 * b * n),
        PartScaling("other", "measured", "flat", lambda b, n: 2.0),
    ], spec_overhead_ms=overhead, spec_overhead_label="borrowed", spec_overhead_source="test")


def test_decomposition_is_exact_and_names_the_driver() -> None:
    model = _model()
    table = decompose_speedup(model, [1, 8], 1.5, 3.0, acceptance_label="assumed", acceptance_source="test")
    for c in (1, 8):
        rows = table[table["concurrency"] == c]
        t1 = 5 + 1 + 0.5 * c + 2
        tv = 5 + 1 + 0.5 * c * 3 + 2 + 2.0
        assert rows["speedup"].iloc[0] == pytest.approx(1.5 * t1 / tv)
        # 1 + the acceptance row + every part's change lands exactly on the prediction
        assert 1 + rows["speedup_change"].sum() == pytest.approx(rows["speedup"].iloc[0])
        assert rows["speedup_after"].iloc[-1] == pytest.approx(rows["speedup"].iloc[0])
        last = rows.iloc[-1]
        assert last["speedup_low_overhead"] > last["speedup"] > last["speedup_high_overhead"]
    assert set(table["label"]) == {"assumed", "borrowed", "fitted", "measured"}
    assert driving_part(table, 1) == ("spec_mode_overhead", pytest.approx(-1.5 * 2 / 11.5))
    assert driving_part(table, 8)[0] == "moe"
    with pytest.raises(SpeclabError, match="at least 1"):
        decompose_speedup(model, [1], 0.5, 2.0, acceptance_label="assumed", acceptance_source="x")


def _profile_tables(spec: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    buckets = {"communication": (100.0, 2.0), "attention": (50.0, 1.0), "moe_gemm": (40.0, 3.0),
               "dense_gemm": (60.0, 0.0), "norms_elementwise": (10.0, 0.0)}
    summary = pd.DataFrame([{"rank": 0, "step_kind": "decode", "bucket": b, "time_us": 0.0, "share": 0.0,
                             "steps": 50, "time_per_step_us": a + s * 8, "tokens_per_step": 8.0}
                            for b, (a, s) in buckets.items()])
    scaling = pd.DataFrame([{"rank": 0, "bucket": b, "steps": 50, "tokens_min": 1.0, "tokens_max": 16.0,
                             "mean_time_us": a + s * 8, "intercept_us": a, "slope_us_per_token": s,
                             "r2": 0.9, "p_value": 0.001 if s else 0.5, "growth_over_range": 0.3,
                             "scales_with_tokens": s > 0} for b, (a, s) in buckets.items()]
                           + [{"rank": 0, "bucket": "(all buckets)", "steps": 50, "tokens_min": 1.0,
                               "tokens_max": 16.0, "mean_time_us": 308.0, "scales_with_tokens": True},
                              {"rank": 0, "bucket": "(step wall)", "steps": 50, "tokens_min": 1.0,
                               "tokens_max": 16.0, "mean_time_us": 358.0, "scales_with_tokens": True}])
    return summary, scaling


def test_profile_decomposition_uses_measured_growth_and_the_stated_attention_form() -> None:
    summary, scaling = _profile_tables()
    model = profile_parts_model(summary, scaling, attention_draft_factor=0.05, spec_overhead_ms=(0.1, 0.3),
                                spec_overhead_source="test")
    parts = {p.part: p for p in model.parts}
    assert parts["communication"].label == "fitted" and parts["other_gemm"].label == "measured"
    assert parts["attention"].label == "assumed"
    base, spec = model.parts_ms(4, 1.0), model.parts_ms(4, 3.0)
    assert spec["communication"] - base["communication"] == pytest.approx(2.0 * 4 * 2 / 1e3)
    assert spec["moe"] - base["moe"] == pytest.approx(3.0 * 8 / 1e3)
    assert spec["other_gemm"] == base["other_gemm"] == pytest.approx(0.06)
    assert spec["attention"] == pytest.approx(base["attention"] * 1.1)  # 2 draft tokens x 5 %
    assert base["other"] == pytest.approx((10.0 + 50.0) / 1e3)  # the unbucketed gap lands in other
    # a profile taken with speculation on measures attention's growth with draft tokens itself
    spec_model = profile_parts_model(summary, scaling, speculative_profile=True)
    assert {p.part: p.label for p in spec_model.parts}["attention"] == "fitted"
    assert spec_model.parts_ms(4, 3.0)["attention"] - spec_model.parts_ms(4, 1.0)["attention"] == pytest.approx(8e-3)
    table = decompose_speedup(model, [1, 4], 1.4, 3.0, acceptance_label="measured", acceptance_source="replay")
    assert len(table) == 2 * 7
    with pytest.raises(SpeclabError, match="no rank 3"):
        profile_parts_model(summary, scaling, rank=3)


@pytest.mark.usefixtures("vllm_lock")  # a benchmark: one at a time on the shared CPU
def test_gpu_step_bench_runs_its_stack_on_this_cpu(tmp_path: Path) -> None:
    from speclab.paths import server_python

    python = server_python()
    if not python.exists():
        pytest.skip("no server venv with torch (make setup)")
    done = subprocess.run([str(python), str(ROOT / "benchmarks/gpu_step.py"), "--device", "cpu", "--tiny",
                           "--shapes", "kimi-k2.5-tp8-rank", "--batches", "1,2", "--ns", "1,2", "--contexts", "32",
                           "--reps", "1", "--out-dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    frame = load_gpu_step(sorted(tmp_path.glob("*.json")))
    assert frame.attrs["machine"]["kimi-k2.5-tp8-rank/tiny"]["device"] == "cpu"
    # the grid: decode and verify points plus the stand-in decode steps of B*n sequences
    assert set(zip(frame["batch"], frame["n"], strict=True)) == {(1, 1), (2, 1), (1, 2), (2, 2), (4, 1)}
    assert (frame["distinct_experts"] >= 2).all() and (frame[["attention_ms", "moe_ms", "dense_ms"]] > 0).all().all()
    assert sys.executable  # the workbook venv itself never needs torch


def test_gpu_step_curves_record_the_machine_and_cover_the_grid(steps) -> None:
    assert set(steps["shape"]) == {"dense-8b", "moe-30b-a3b", "kimi-k2.5-tp8-rank"}
    for shape, machine in steps.attrs["machine"].items():
        assert machine["gpu_name"] == "NVIDIA H200" and machine["driver"] and machine["torch"], shape
        assert machine["date_utc"] and machine["triton"]
        assert max(machine["checks_rel_error"].values()) < 1e-2  # the Triton attention and grouped GEMMs are right
        part = steps[steps["shape"] == shape]
        grid = set(zip(part["batch"], part["n"], part["context"], strict=True))
        assert {(b, n, c) for b in (1, 2, 4, 8, 16, 32, 64) for n in (1, 2, 4, 8) for c in (1024, 4096)} <= grid
        assert (512, 1, 4096) in grid  # baseline_slope's stand-in for B = 64, n = 8
        assert steps.attrs["shapes"][shape]["cuda_graphs"]
