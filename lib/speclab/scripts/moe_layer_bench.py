"""Time one MoE layer's expert GEMMs against tokens verified and distinct experts touched.

Run by :mod:`speclab.moe.bench` with a python that has torch (the embedded server's venv on
CPU, any CUDA torch on a GPU box); stand-alone on purpose (torch + the standard library) so it
can be copied to a GPU machine as one file. Reads a JSON config on stdin (or ``--config
FILE``), writes a JSON result on stdout (or ``--out FILE``).

What is timed, per (shape, routing, tokens): a step in which ``tokens`` tokens are each
routed to ``top_k`` of ``experts`` experts. The layer runs one expert at a time over the
distinct experts touched (gather the expert's tokens, gate/up GEMM, SiLU x up, down GEMM,
weighted scatter-add), the way a per-expert grouped kernel reads each touched expert's
weights once. Decode-time MoE is bound by reading those weights, so time should follow the
number of distinct experts, not the number of tokens. On CUDA each plan is captured into a
CUDA graph (launch overhead removed) and replayed; on CPU it runs eagerly.

Caches: consecutive samples use different routing draws and, where memory allows, different
copies of the layer's weights, so a sample rarely finds its experts still in cache (a real
model reads another layer's weights in between).

Routing: ``uniform`` (each token's top-k a uniformly random set), ``zipfS`` (expert
popularity proportional to 1/rank^S over a random permutation of the experts, fixed within
a sample; each token draws top-k without replacement, Gumbel top-k).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import platform
import statistics
import sys
import time
from typing import Any

import torch

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def _routing(tokens: int, experts: int, top_k: int, routing: str, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [tokens, top_k] int64, weights [tokens, top_k] float32, rows summing to 1)."""
    if routing == "uniform":
        logits = torch.zeros(tokens, experts)
    elif routing.startswith("zipf"):
        s = float(routing[4:] or 1.0)
        ranks = torch.randperm(experts, generator=gen).float() + 1.0
        logits = (-s * torch.log(ranks)).expand(tokens, experts).clone()
    else:
        raise SystemExit(f"unknown routing {routing!r} (uniform | zipfS)")
    gumbel = -torch.log(-torch.log(torch.rand(tokens, experts, generator=gen).clamp_min(1e-20)))
    ids = torch.topk(logits + gumbel, top_k, dim=1).indices
    weights = torch.rand(tokens, top_k, generator=gen) + 0.5
    return ids, weights / weights.sum(dim=1, keepdim=True)


class Layer:
    """One layer's expert weights (``copies`` independent copies) on a device."""

    def __init__(self, shape: dict[str, Any], device: torch.device, copies: int, seed: int) -> None:
        self.experts, self.top_k = int(shape["experts"]), int(shape["top_k"])
        self.hidden, self.ffn = int(shape["hidden"]), int(shape["ffn"])
        self.dtype = DTYPES[shape.get("dtype", "bfloat16")]
        gen = torch.Generator(device=device).manual_seed(seed)
        scale = 1.0 / math.sqrt(self.hidden)
        self.gate_up = [torch.randn(self.experts, 2 * self.ffn, self.hidden, device=device, generator=gen,
                                    dtype=self.dtype) * scale for _ in range(copies)]
        self.down = [torch.randn(self.experts, self.hidden, self.ffn, device=device, generator=gen,
                                 dtype=self.dtype) * scale for _ in range(copies)]

    @property
    def expert_bytes(self) -> int:
        return 3 * self.hidden * self.ffn * torch.tensor([], dtype=self.dtype).element_size()


def _plan(ids: torch.Tensor, weights: torch.Tensor, device: torch.device) -> list[tuple[int, torch.Tensor, torch.Tensor]]:
    """Per distinct expert: (expert id, token indices, routing weights [t, 1])."""
    plan = []
    for expert in torch.unique(ids).tolist():
        rows, cols = (ids == expert).nonzero(as_tuple=True)
        plan.append((int(expert), rows.to(device), weights[rows, cols].unsqueeze(1).to(device)))
    return plan


def _forward(layer: Layer, copy: int, x: torch.Tensor, out: torch.Tensor,
             plan: list[tuple[int, torch.Tensor, torch.Tensor]]) -> None:
    out.zero_()
    gate_up, down, ffn = layer.gate_up[copy], layer.down[copy], layer.ffn
    for expert, rows, w in plan:
        h = x.index_select(0, rows) @ gate_up[expert].t()
        act = torch.nn.functional.silu(h[:, :ffn]) * h[:, ffn:]
        y = act @ down[expert].t()
        out.index_add_(0, rows, (y.float() * w).to(out.dtype))


def measure_point(layer: Layer, tokens: int, routing: str, samples: int, repeats: int,
                  device: torch.device, gen: torch.Generator, use_graphs: bool) -> dict[str, Any]:
    """Median seconds per layer step over ``repeats``, each running ``samples`` routing draws."""
    copies = len(layer.gate_up)
    draws = [_routing(tokens, layer.experts, layer.top_k, routing, gen) for _ in range(samples)]
    plans = [_plan(ids, w, device) for ids, w in draws]
    distinct = [len(p) for p in plans]
    x = torch.randn(tokens, layer.hidden, device=device, dtype=layer.dtype)
    out = torch.empty_like(x)

    def run_all() -> None:
        for i, plan in enumerate(plans):
            _forward(layer, i % copies, x, out, plan)

    times: list[float] = []
    if use_graphs:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            run_all()  # warm-up on a side stream before capture, as torch's docs require
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            run_all()
        graph.replay()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(repeats):
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / samples)
        del graph
    else:
        run_all()
        for _ in range(repeats):
            t0 = time.perf_counter()
            run_all()
            times.append((time.perf_counter() - t0) / samples)
    step_s = statistics.median(times)
    mean_distinct = sum(distinct) / len(distinct)
    return {
        "tokens": tokens,
        "routing": routing,
        "distinct_experts": mean_distinct,
        "distinct_experts_min": min(distinct),
        "distinct_experts_max": max(distinct),
        "step_s": step_s,
        "step_s_min": min(times),
        "step_s_max": max(times),
        "repeats": repeats,
        "samples": samples,
        "weight_gb_per_s": mean_distinct * layer.expert_bytes / step_s / 1e9,
    }


def machine(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host_cpu": platform.processor() or platform.machine(),
        "device": device.type,
        "cpu_threads": torch.get_num_threads(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if names:
            info["host_cpu"] = names[0]
    except OSError:
        pass
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu_name=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                    cuda=torch.version.cuda, gpu_count=torch.cuda.device_count())
    return info


def run(config: dict[str, Any]) -> dict[str, Any]:
    want = config.get("device", "auto")
    device = torch.device("cuda" if (want == "auto" and torch.cuda.is_available()) else
                          ("cpu" if want == "auto" else want))
    use_graphs = device.type == "cuda" and bool(config.get("cuda_graphs", True))
    if device.type == "cpu" and config.get("threads"):
        torch.set_num_threads(int(config["threads"]))
    memory_budget = float(config.get("weight_memory_gb", 24 if device.type == "cuda" else 1.5)) * 1e9
    result: dict[str, Any] = {"machine": machine(device), "cuda_graphs": use_graphs, "config": config, "shapes": []}
    for index, shape in enumerate(config["shapes"]):
        # a budget per shape, so a slow shape cannot starve the next one of its curve
        deadline = time.monotonic() + float(shape.get("time_budget_s", config.get("time_budget_s", 1e9)))
        probe = 3 * int(shape["hidden"]) * int(shape["ffn"]) * DTYPES[shape.get("dtype", "bfloat16")].itemsize
        layer_bytes = probe * int(shape["experts"])
        copies = max(1, min(int(config.get("max_copies", 4)), int(memory_budget // layer_bytes)))
        t0 = time.monotonic()
        layer = Layer(shape, device, copies, seed=int(config.get("seed", 0)) + index)
        gen = torch.Generator().manual_seed(int(config.get("seed", 0)) + 100 + index)
        points = []
        for routing in config.get("routings", ["uniform", "zipf1.0"]):
            for tokens in config["tokens"]:
                if time.monotonic() > deadline:
                    break
                points.append(measure_point(layer, int(tokens), routing, int(config.get("samples", 4)),
                                            int(config.get("repeats", 7)), device, gen, use_graphs))
                print(f"{shape.get('name')} {routing} n={tokens}: {points[-1]['step_s'] * 1e3:.3f} ms "
                      f"d={points[-1]['distinct_experts']:.1f}", file=sys.stderr, flush=True)
        result["shapes"].append({"shape": shape, "weight_copies": copies, "expert_bytes": layer.expert_bytes,
                                 "seconds": round(time.monotonic() - t0, 1), "points": points})
        del layer
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--config", help="JSON config file (default: stdin)")
    parser.add_argument("--out", help="write the JSON result here (default: stdout)")
    args = parser.parse_args()
    if args.config:
        with open(args.config) as f:
            config = json.load(f)
    else:
        config = json.load(sys.stdin)
    with torch.inference_mode():
        result = run(config)
    text = json.dumps(result, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
