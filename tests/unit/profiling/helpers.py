"""The recorded traces and synthetic-trace builders the profiling tests share.

Real fixtures (tests/data/traces/README.md): an H200 trace of a small Qwen2-MoE decoding
under torch.profiler with vLLM-named steps, and a CPU trace of the embedded vLLM with
n-gram speculation. Synthetic traces cover layouts and overlap arithmetic.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
GPU_DIR = TRACES / "h200-qwen2moe"
CPU_DIR = TRACES / "vllm-cpu-ngram"


def gpu_trace() -> Path:
    return next(GPU_DIR.glob("*.pt.trace.json.gz"))


def cpu_trace() -> Path:
    return next(CPU_DIR.glob("*.pt.trace.json.gz"))


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
