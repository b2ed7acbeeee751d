"""The verify-cost benchmark: one MoE layer of a given shape, step time against tokens
verified and distinct experts touched, on this machine or shipped from an H200.

The timing itself is ``scripts/moe_layer_bench.py``, a stand-alone torch script (module
docstring there says what is timed). The workbook venv has no torch, so on this machine it
runs in the embedded server's venv (torch CPU, the same interpreter that serves vLLM); on a
GPU box the same file runs with any CUDA torch (CUDA graphs) and its JSON is read back here.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from speclab.errors import SpeclabError
from speclab.runs import json_record

__all__ = [
    "BENCH_JSON",
    "LayerShape",
    "SHAPES",
    "bench_frame",
    "load_bench",
    "run_layer_bench",
    "shipped_gpu_bench",
]

BENCH_JSON = "moe_layer_bench.json"
_SCRIPT = Path(__file__).parents[1] / "scripts" / "moe_layer_bench.py"
_DATA = Path(__file__).parents[1] / "data" / "moe"


class LayerShape(BaseModel):
    """One MoE layer's shape: routed experts, experts per token, hidden size, expert FFN size."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., description="label, e.g. kimi-k2.5")
    experts: int = Field(..., ge=1, description="routed experts per layer")
    top_k: int = Field(..., ge=1, description="experts per token")
    hidden: int = Field(..., ge=8, description="model hidden size")
    ffn: int = Field(..., ge=8, description="one expert's intermediate size")
    dtype: str = Field("bfloat16", pattern="^(bfloat16|float16|float32)$")

    @property
    def expert_bytes(self) -> int:
        """Bytes of one expert's weights (gate, up, down)."""
        return 3 * self.hidden * self.ffn * (4 if self.dtype == "float32" else 2)


# Shapes from the models' config.json files on Hugging Face (moonshotai/Kimi-K2.5:
# n_routed_experts 384, num_experts_per_tok 8, hidden_size 7168, moe_intermediate_size 2048;
# Qwen/Qwen3-30B-A3B: num_experts 128, num_experts_per_tok 8, hidden_size 2048,
# moe_intermediate_size 768).
SHAPES: dict[str, LayerShape] = {
    "kimi-k2.5": LayerShape(name="kimi-k2.5", experts=384, top_k=8, hidden=7168, ffn=2048),
    "qwen3-30b-a3b": LayerShape(name="qwen3-30b-a3b", experts=128, top_k=8, hidden=2048, ffn=768),
}


def shipped_gpu_bench() -> Path:
    """The H200 curves shipped with speclab (run with ``data/moe/h200-config.json``)."""
    return _DATA / "h200-layer-bench.json"


def run_layer_bench(shapes: list[LayerShape], tokens: list[int], *, routings: list[str] | None = None,
                    samples: int = 3, repeats: int = 5, device: str = "cpu", threads: int | None = None,
                    time_budget_s: float = 120.0, out: str | Path | None = None,
                    python: str | Path | None = None) -> dict[str, Any]:
    """Time the layer on this machine (server venv's torch); returns the script's JSON,
    also written to ``out`` when given. Median of ``repeats``, each over ``samples`` routing draws."""
    from speclab.paths import server_python

    interpreter = Path(python or server_python())
    if not interpreter.exists():
        raise SpeclabError(f"No python with torch at {interpreter}; run `make setup` (it builds the server venv).")
    config = {
        "device": device, "tokens": sorted({int(t) for t in tokens}), "routings": routings or ["uniform", "zipf1.0"],
        "samples": samples, "repeats": repeats, "seed": 0, "time_budget_s": time_budget_s,
        "weight_memory_gb": 1.5, "max_copies": 4, "shapes": [s.model_dump() for s in shapes],
    }
    if threads:
        config["threads"] = threads
    result = subprocess.run([str(interpreter), str(_SCRIPT)], input=json.dumps(config), capture_output=True,
                            text=True, timeout=max(60.0, time_budget_s * len(shapes) * 2 + 60))
    if result.returncode != 0:
        raise SpeclabError("The MoE layer benchmark failed; its output ends with:", detail=result.stderr[-3000:])
    data = json.loads(result.stdout)
    if out is not None:
        Path(out).write_text(json.dumps(data, indent=1))
    return data


def load_bench(source: str | Path | dict[str, Any]) -> dict[str, Any]:
    """A benchmark result (the script's JSON) from a file or as given."""
    return json_record(source, what="MoE layer benchmark", fix="check the path or rerun the benchmark")


def bench_frame(data: dict[str, Any], label: str | None = None) -> pd.DataFrame:
    """One row per (shape, routing, tokens): tidy, units in the names; the machine in columns."""
    machine = data.get("machine", {})
    where = label or (machine.get("gpu_name") or machine.get("host_cpu") or machine.get("device", "?"))
    rows = []
    for block in data.get("shapes", []):
        shape = block["shape"]
        for p in block["points"]:
            rows.append({
                "machine": where, "device": machine.get("device"), "cuda_graphs": bool(data.get("cuda_graphs")),
                "shape": shape.get("name"), "experts": shape["experts"], "top_k": shape["top_k"],
                "hidden": shape["hidden"], "ffn": shape["ffn"], "dtype": shape.get("dtype", "bfloat16"),
                "expert_mib": block["expert_bytes"] / 2**20, "routing": p["routing"], "tokens": p["tokens"],
                "distinct_experts": p["distinct_experts"], "step_ms": p["step_s"] * 1e3, "step_s": p["step_s"],
                "weight_gb_per_s": p["weight_gb_per_s"], "repeats": p["repeats"], "samples": p["samples"],
            })
    frame = pd.DataFrame(rows)
    if frame.empty:
        raise SpeclabError("The MoE layer benchmark holds no points; rerun it with a larger time budget.")
    one = frame[frame["tokens"] == 1].groupby(["shape", "routing"])["step_s"].first()
    frame["multiplier_vs_1_token"] = [
        row.step_s / one.get((row.shape, row.routing), float("nan")) for row in frame.itertuples()]
    frame.attrs["machine"] = machine
    return frame
