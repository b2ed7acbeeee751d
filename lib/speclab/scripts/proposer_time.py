"""Time the engine's own proposer code (vLLM's n-gram, and suffix decoding's) per engine step.

Run with the server venv's python, where ``vllm`` (and ``arctic_inference`` for suffix) are
importable: the classes timed are vLLM 0.32's own ``NgramProposer`` and ``SuffixDecodingProposer``,
driven as the model runner drives them once per decode step.

Reads JSON on stdin::

    {"methods": ["ngram", "suffix"], "ks": [4, 8], "batches": [1, 4, 8],
     "prompt_lookup_min": 2, "prompt_lookup_max": 4, "max_model_len": 2048,
     "sequences": [{"prompt": [ids...], "output": [ids...]}, ...], "max_steps": 64}

and writes one JSON object on stdout: ``{"cpu": ..., "threads": ..., "rows": [{"method", "k",
"batch", "steps", "median_ms", "p90_ms", "mean_ms"}, ...], "failed": {method: why}}`` (one
interpreter for every method: vLLM is imported once). For each batch size B, B
sequences decode side by side (a sequence that ends is replaced by the next, as a closed loop
admits a new request); each engine step appends every sequence's next real token and calls the
proposer once for the whole batch, timed with ``perf_counter``. The baseline's own greedy tokens
are used, so the contexts (and the lookups' work) are the real ones; a speculative run would
append more than one token a step where drafts are accepted, which this does not model.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from types import SimpleNamespace
from typing import Any


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _config(method: str, k: int, spec: dict[str, Any], max_len: int, max_seqs: int) -> Any:
    speculative = SimpleNamespace(
        method=method, num_speculative_tokens=k,
        prompt_lookup_min=spec.get("prompt_lookup_min", 2), prompt_lookup_max=spec.get("prompt_lookup_max", 4),
        suffix_decoding_max_tree_depth=spec.get("suffix_decoding_max_tree_depth", 24),
        suffix_decoding_max_cached_requests=spec.get("suffix_decoding_max_cached_requests", 10000),
        suffix_decoding_max_spec_factor=spec.get("suffix_decoding_max_spec_factor", 1.0),
        suffix_decoding_min_token_prob=spec.get("suffix_decoding_min_token_prob", 0.1))
    return SimpleNamespace(speculative_config=speculative, model_config=SimpleNamespace(max_model_len=max_len),
                           scheduler_config=SimpleNamespace(max_num_seqs=max_seqs),
                           parallel_config=SimpleNamespace(tensor_parallel_size=1))


def _time_batch(method: str, proposer: Any, k: int, batch: int, sequences: list[dict[str, Any]], max_len: int,
                max_steps: int) -> list[float]:
    import numpy as np

    queue = list(range(len(sequences)))
    slots: list[dict[str, Any]] = []
    serial = 0

    def admit() -> None:
        nonlocal serial
        while len(slots) < batch and queue:
            seq = sequences[queue.pop(0)]
            if len(seq["output"]) < 2:
                continue
            serial += 1
            slots.append({"id": f"r{serial}", "prompt": list(seq["prompt"]), "output": list(seq["output"]), "t": 1})

    admit()
    times: list[float] = []
    token_ids = np.zeros((max(batch, 1), max_len), dtype=np.int32)
    while slots and len(times) < max_steps:
        n = len(slots)
        num_tokens = np.zeros(n, dtype=np.int32)
        sampled: list[list[int]] = []
        for i, slot in enumerate(slots):
            context = (slot["prompt"] + slot["output"][: slot["t"]])[-max_len:]
            token_ids[i, : len(context)] = context
            num_tokens[i] = len(context)
            sampled.append([slot["output"][slot["t"] - 1]])
        if method == "ngram":
            started = time.perf_counter()
            proposer.propose(k, sampled, num_tokens, token_ids[:n])
        else:
            batch_view = SimpleNamespace(
                req_ids=[s["id"] for s in slots], req_id_to_index={s["id"]: i for i, s in enumerate(slots)},
                num_tokens_no_spec=num_tokens, token_ids_cpu=token_ids[:n],
                num_prompt_tokens=np.array([min(len(s["prompt"]), max_len) for s in slots], dtype=np.int32))
            started = time.perf_counter()
            proposer.propose(k, batch_view, sampled)
        times.append(time.perf_counter() - started)
        for slot in slots:
            slot["t"] += 1
        slots[:] = [s for s in slots if s["t"] <= len(s["output"])]
        admit()
    return times


def main() -> int:
    request = json.load(sys.stdin)
    max_len = int(request.get("max_model_len", 2048))
    sequences = request["sequences"]
    batches = [int(b) for b in request["batches"]]
    rows: list[dict[str, Any]] = []
    failed: dict[str, str] = {}
    for method in request.get("methods") or [request.get("method")]:
        for k in request["ks"]:
            config = _config(method, int(k), request, max_len, max(batches + [1]))
            try:
                if method == "ngram":
                    from vllm.v1.spec_decode.ngram_proposer import NgramProposer

                    proposer: Any = NgramProposer(config)  # its constructor compiles the numba kernel once
                elif method == "suffix":
                    from vllm.v1.spec_decode.suffix_decoding import SuffixDecodingProposer

                    proposer = SuffixDecodingProposer(config)
                else:
                    failed[method] = f"no CPU proposer to time for method {method!r}"
                    break
            except ImportError as exc:
                failed[method] = f"its proposer does not import here ({exc})"
                break
            for batch in batches:
                _time_batch(method, proposer, int(k), batch, sequences, max_len, 8)  # warm caches and threads
                times = _time_batch(method, proposer, int(k), batch, sequences, max_len,
                                    int(request.get("max_steps", 64)))
                if not times:
                    continue
                ordered = sorted(times)
                rows.append({"method": method, "k": int(k), "batch": batch, "steps": len(times),
                             "median_ms": 1e3 * statistics.median(times), "mean_ms": 1e3 * statistics.fmean(times),
                             "p90_ms": 1e3 * ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]})
    print(json.dumps({"cpu": _cpu(), "threads": os.cpu_count(), "rows": rows, "failed": failed}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
